// a StableHLO all_gather without replica_groups (required: all ranks is not implied)
"func.func"() <{function_type = (tensor<4xf32>) -> tensor<8xf32>, sym_name = "f"}> ({
^bb0(%x: tensor<4xf32>):
  %g = "stablehlo.all_gather"(%x) {all_gather_dim = 0 : i64} : (tensor<4xf32>) -> tensor<8xf32>
  "func.return"(%g) : (tensor<8xf32>) -> ()
}) : () -> ()
