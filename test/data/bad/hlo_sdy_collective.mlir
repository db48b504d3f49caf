// Shardy's explicit all_gather (axis-based): not imported, never compute (session 30 review)
"builtin.module"() ({
  "sdy.mesh"() <{mesh = #sdy.mesh<["x"=2]>, sym_name = "mesh"}> : () -> ()
  func.func @main(%x: tensor<64x8xf32>) -> tensor<64x8xf32> {
    %0 = "sdy.all_gather"(%x) <{gathering_axes = #sdy<list_of_axis_ref_lists[{"x"}, {}]>, out_sharding = #sdy.sharding<@mesh, [{}, {}]>}> : (tensor<64x8xf32>) -> tensor<64x8xf32>
    func.return %0 : tensor<64x8xf32>
  }
}) : () -> ()
