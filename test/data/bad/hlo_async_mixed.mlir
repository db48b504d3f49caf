// an async_start wrapping a convert and an all_reduce: not one collective (session 30 review)
func.func @main(%x: tensor<64xf32>) -> tensor<64xbf16> {
  %t = "stablehlo.async_start"(%x) ({
  ^bb0(%p: tensor<64xf32>):
    %c = "stablehlo.convert"(%p) : (tensor<64xf32>) -> tensor<64xbf16>
    %r = "stablehlo.all_reduce"(%c) ({
    ^bb1(%a: tensor<bf16>, %b: tensor<bf16>):
      %s = "stablehlo.add"(%a, %b) : (tensor<bf16>, tensor<bf16>) -> tensor<bf16>
      "stablehlo.return"(%s) : (tensor<bf16>) -> ()
    }) {replica_groups = dense<[[0, 1]]> : tensor<1x2xi64>} : (tensor<64xbf16>) -> tensor<64xbf16>
    "stablehlo.return"(%r) : (tensor<64xbf16>) -> ()
  }) {execution_thread = "main"} : (tensor<64xf32>) -> !stablehlo.future<tensor<64xbf16>>
  %d = "stablehlo.async_done"(%t) : (!stablehlo.future<tensor<64xbf16>>) -> tensor<64xbf16>
  func.return %d : tensor<64xbf16>
}
