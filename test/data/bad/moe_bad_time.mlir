// moe_layer.mlir with a hand-edited lancet.time_us that is not a number
builtin.module attributes {lancet.world_size = 2 : i64} {
  func.func @f(%x: tensor<16x16xf32>, %wg: tensor<16x4xf32>, %we1: tensor<2x16x64xf32>, %we2: tensor<2x64x16xf32>) -> tensor<16x16xf32> {
    %logits = comp.matmul %x, %wg : (tensor<16x16xf32>, tensor<16x4xf32>) -> tensor<16x4xf32>
    %combine, %dispatch = comp.moe_gate %logits {capacity = 4 : i64} : (tensor<16x4xf32>) -> (tensor<16x4x4xf32>, tensor<16x4x4xf32>)
    %dispatched = comp.moe_dispatch %x, %dispatch : (tensor<16x16xf32>, tensor<16x4x4xf32>) -> tensor<4x4x16xf32>
    %expert_in = comm.all_to_all %dispatched concat 1 : (tensor<4x4x16xf32>) -> tensor<2x8x16xf32>
    %h = comp.batch_matmul %expert_in, %we1 : (tensor<2x8x16xf32>, tensor<2x16x64xf32>) -> tensor<2x8x64xf32>
    %act = comp.gelu %h {lancet.time_us = "x"} : (tensor<2x8x64xf32>) -> tensor<2x8x64xf32>
    %out = comp.batch_matmul %act, %we2 : (tensor<2x8x64xf32>, tensor<2x64x16xf32>) -> tensor<2x8x16xf32>
    %returned = comm.all_to_all %out split 1 : (tensor<2x8x16xf32>) -> tensor<4x4x16xf32>
    %y = comp.moe_combine %returned, %combine : (tensor<4x4x16xf32>, tensor<16x4x4xf32>) -> tensor<16x16xf32>
    func.return %y : tensor<16x16xf32>
  }
}
