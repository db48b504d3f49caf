// two MoE layers on the same input whose ops interleave in program order
builtin.module attributes {lancet.world_size = 2 : i64} {
  func.func @f(%x: tensor<16x16xf32>, %wg: tensor<16x4xf32>, %we1: tensor<2x16x64xf32>, %we2: tensor<2x64x16xf32>) -> (tensor<16x16xf32>, tensor<16x16xf32>) {
    %logits = comp.matmul %x, %wg : (tensor<16x16xf32>, tensor<16x4xf32>) -> tensor<16x4xf32>
    %combine, %dispatch = comp.moe_gate %logits {capacity = 4 : i64} : (tensor<16x4xf32>) -> (tensor<16x4x4xf32>, tensor<16x4x4xf32>)
    %dispatched = comp.moe_dispatch %x, %dispatch : (tensor<16x16xf32>, tensor<16x4x4xf32>) -> tensor<4x4x16xf32>
    %expert_in = comm.all_to_all %dispatched concat 1 : (tensor<4x4x16xf32>) -> tensor<2x8x16xf32>
    %logits2 = comp.matmul %x, %wg : (tensor<16x16xf32>, tensor<16x4xf32>) -> tensor<16x4xf32>
    %combine2, %dispatch2 = comp.moe_gate %logits2 {capacity = 4 : i64} : (tensor<16x4xf32>) -> (tensor<16x4x4xf32>, tensor<16x4x4xf32>)
    %dispatched2 = comp.moe_dispatch %x, %dispatch2 : (tensor<16x16xf32>, tensor<16x4x4xf32>) -> tensor<4x4x16xf32>
    %expert_in2 = comm.all_to_all %dispatched2 concat 1 : (tensor<4x4x16xf32>) -> tensor<2x8x16xf32>
    %h = comp.batch_matmul %expert_in, %we1 : (tensor<2x8x16xf32>, tensor<2x16x64xf32>) -> tensor<2x8x64xf32>
    %act = comp.gelu %h : (tensor<2x8x64xf32>) -> tensor<2x8x64xf32>
    %out = comp.batch_matmul %act, %we2 : (tensor<2x8x64xf32>, tensor<2x64x16xf32>) -> tensor<2x8x16xf32>
    %returned = comm.all_to_all %out split 1 : (tensor<2x8x16xf32>) -> tensor<4x4x16xf32>
    %h2 = comp.batch_matmul %expert_in2, %we1 : (tensor<2x8x16xf32>, tensor<2x16x64xf32>) -> tensor<2x8x64xf32>
    %act2 = comp.gelu %h2 : (tensor<2x8x64xf32>) -> tensor<2x8x64xf32>
    %out2 = comp.batch_matmul %act2, %we2 : (tensor<2x8x64xf32>, tensor<2x64x16xf32>) -> tensor<2x8x16xf32>
    %returned2 = comm.all_to_all %out2 split 1 : (tensor<2x8x16xf32>) -> tensor<4x4x16xf32>
    %y = comp.moe_combine %returned, %combine : (tensor<4x4x16xf32>, tensor<16x4x4xf32>) -> tensor<16x16xf32>
    %y2 = comp.moe_combine %returned2, %combine2 : (tensor<4x4x16xf32>, tensor<16x4x4xf32>) -> tensor<16x16xf32>
    func.return %y, %y2 : tensor<16x16xf32>, tensor<16x16xf32>
  }
}
