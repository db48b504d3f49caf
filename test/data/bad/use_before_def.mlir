func.func @f(%a: tensor<4xf32>) -> tensor<4xf32> {
  %b = comp.add %c, %a : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %c = comp.add %a, %a : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  func.return %b : tensor<4xf32>
}
