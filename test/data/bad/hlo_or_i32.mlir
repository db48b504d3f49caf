// a bitwise or of integers: max only equals or on booleans (session 30 review)
func.func @main(%x: tensor<16xi32>) -> tensor<16xi32> {
  %r = "stablehlo.all_reduce"(%x) ({
  ^bb0(%a: tensor<i32>, %b: tensor<i32>):
    %s = "stablehlo.or"(%a, %b) : (tensor<i32>, tensor<i32>) -> tensor<i32>
    "stablehlo.return"(%s) : (tensor<i32>) -> ()
  }) {replica_groups = dense<[[0, 1]]> : tensor<1x2xi64>} : (tensor<16xi32>) -> tensor<16xi32>
  func.return %r : tensor<16xi32>
}
