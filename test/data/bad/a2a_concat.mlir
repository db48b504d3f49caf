builtin.module attributes {lancet.world_size = 4 : i64} {
  func.func @f(%a: tensor<8x16x256xf32>, %b: tensor<8x16x256xf32>) -> (tensor<8x16x256xf32>, tensor<8x16x256xf32>) {
    %x = comm.all_to_all %a : (tensor<8x16x256xf32>) -> tensor<8x16x256xf32>
    %y = comm.all_to_all %b concat 1 : (tensor<8x16x256xf32>) -> tensor<8x16x256xf32>
    func.return %x, %y : tensor<8x16x256xf32>, tensor<8x16x256xf32>
  }
}
