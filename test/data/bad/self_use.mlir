func.func @f(%x: tensor<8xf32>) -> tensor<8xf32> {
  %a = comp.add %a, %x : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
  func.return %a : tensor<8xf32>
}
