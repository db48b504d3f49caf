func.func @f(%x: tensor<1000000x2000000xf32>) -> tensor<1000000x2000000xf32> {
  %r = comp.add %x, %x : (tensor<1000000x2000000xf32>, tensor<1000000x2000000xf32>) -> tensor<1000000x2000000xf32>
  func.return %r : tensor<1000000x2000000xf32>
}
