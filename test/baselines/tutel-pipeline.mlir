// RUN: lancet-opt %s -p 'tutel-pipeline{degree=2}' --split-input-file | filecheck %s
// RUN: lancet-opt %s -p 'tutel-pipeline{degree=1}' --split-input-file | filecheck %s --check-prefix=ONE
// RUN: not lancet-opt %s -p 'tutel-pipeline{degree=3}' --split-input-file 2>&1 | filecheck %s --check-prefix=BAD

// One expert block on 2 ranks: 4 experts (2 per rank), capacity 4, hidden 8, FFN 16.
// degree=2 splits the dispatched buffer along the capacity dim (4 -> 2 x 2); each chunk
// runs its own all-to-all, expert FFN and return all-to-all (lancet.part = k), interleaved
// so chunk 0's compute follows chunk 1's dispatch; the returned chunks are concatenated.
builtin.module attributes {lancet.world_size = 2 : i64} {
  func.func @expert_block(%d: tensor<4x4x8xf32>, %w1: tensor<2x8x16xf32>, %w2: tensor<2x16x8xf32>) -> tensor<4x4x8xf32> {
    %x = comm.all_to_all %d concat 1 : (tensor<4x4x8xf32>) -> tensor<2x8x8xf32>
    %h = comp.batch_matmul %x, %w1 : (tensor<2x8x8xf32>, tensor<2x8x16xf32>) -> tensor<2x8x16xf32>
    %a = comp.gelu %h : (tensor<2x8x16xf32>) -> tensor<2x8x16xf32>
    %y = comp.batch_matmul %a, %w2 : (tensor<2x8x16xf32>, tensor<2x16x8xf32>) -> tensor<2x8x8xf32>
    %r = comm.all_to_all %y split 1 : (tensor<2x8x8xf32>) -> tensor<4x4x8xf32>
    func.return %r : tensor<4x4x8xf32>
  }
}

// CHECK-LABEL: func.func @expert_block
// CHECK-NEXT:    %[[C0:.*]], %[[C1:.*]] = comp.split %d {axis = 1 : i64, num = 2 : i64} : (tensor<4x4x8xf32>) -> (tensor<4x2x8xf32>, tensor<4x2x8xf32>)
// CHECK-NEXT:    %x_part0 = comm.all_to_all %[[C0]] concat 1 {lancet.part = 0 : i64} : (tensor<4x2x8xf32>) -> tensor<2x4x8xf32>
// CHECK-NEXT:    %x_part1 = comm.all_to_all %[[C1]] concat 1 {lancet.part = 1 : i64} : (tensor<4x2x8xf32>) -> tensor<2x4x8xf32>
// CHECK-NEXT:    %[[H0:.*]] = comp.batch_matmul %x_part0, %w1 {lancet.part = 0 : i64{{(, lancet.origin = .*)?}}} : (tensor<2x4x8xf32>, tensor<2x8x16xf32>) -> tensor<2x4x16xf32>
// CHECK-NEXT:    %[[A0:.*]] = comp.gelu %[[H0]] {lancet.part = 0 : i64{{(, lancet.origin = .*)?}}}
// CHECK-NEXT:    %[[Y0:.*]] = comp.batch_matmul %[[A0]], %w2 {lancet.part = 0 : i64{{(, lancet.origin = .*)?}}}
// CHECK-NEXT:    %[[R0:.*]] = comm.all_to_all %[[Y0]] split 1 {lancet.part = 0 : i64} : (tensor<2x4x8xf32>) -> tensor<4x2x8xf32>
// CHECK-NEXT:    %[[H1:.*]] = comp.batch_matmul %x_part1, %w1 {lancet.part = 1 : i64{{(, lancet.origin = .*)?}}}
// CHECK-NEXT:    %[[A1:.*]] = comp.gelu %[[H1]] {lancet.part = 1 : i64{{(, lancet.origin = .*)?}}}
// CHECK-NEXT:    %[[Y1:.*]] = comp.batch_matmul %[[A1]], %w2 {lancet.part = 1 : i64{{(, lancet.origin = .*)?}}}
// CHECK-NEXT:    %[[R1:.*]] = comm.all_to_all %[[Y1]] split 1 {lancet.part = 1 : i64} : (tensor<2x4x8xf32>) -> tensor<4x2x8xf32>
// CHECK-NEXT:    %[[R:.*]] = comp.concat %[[R0]], %[[R1]] {axis = 1 : i64} : (tensor<4x2x8xf32>, tensor<4x2x8xf32>) -> tensor<4x4x8xf32>
// CHECK-NEXT:    func.return %[[R]] : tensor<4x4x8xf32>

// ONE-LABEL: func.func @expert_block
// ONE-NEXT:    %x = comm.all_to_all %d concat 1 : (tensor<4x4x8xf32>) -> tensor<2x8x8xf32>
// ONE-NOT:     lancet.part
// ONE:         %r = comm.all_to_all %y split 1

// BAD: tutel-pipeline: capacity 4 of the expert block entered by 'x' is not divisible by degree 3

// -----

// Forward and backward blocks of one layer. The backward block reads the forward block's
// chunks (%x_part<k>), and the expert weight gradient becomes a sum of per-chunk partials, accumulated in
// place (in_place: the second chunk's batch_matmul_dw adds into the first's buffer, beta = 1).
builtin.module attributes {lancet.world_size = 2 : i64} {
  func.func @fwd_bwd(%d: tensor<4x4x8xf32>, %w: tensor<2x8x8xf32>, %g: tensor<4x4x8xf32>) -> (tensor<4x4x8xf32>, tensor<4x4x8xf32>, tensor<2x8x8xf32>) {
    %x = comm.all_to_all %d concat 1 {lancet.role = "fwd"} : (tensor<4x4x8xf32>) -> tensor<2x8x8xf32>
    %y = comp.batch_matmul %x, %w {lancet.role = "fwd"} : (tensor<2x8x8xf32>, tensor<2x8x8xf32>) -> tensor<2x8x8xf32>
    %r = comm.all_to_all %y split 1 {lancet.role = "fwd"} : (tensor<2x8x8xf32>) -> tensor<4x4x8xf32>
    %dy = comm.all_to_all %g concat 1 {lancet.role = "dx"} : (tensor<4x4x8xf32>) -> tensor<2x8x8xf32>
    %dx = comp.batch_matmul_dx %dy, %w {lancet.role = "dx"} : (tensor<2x8x8xf32>, tensor<2x8x8xf32>) -> tensor<2x8x8xf32>
    %dw = comp.batch_matmul_dw %x, %dy {lancet.role = "dw"} : (tensor<2x8x8xf32>, tensor<2x8x8xf32>) -> tensor<2x8x8xf32>
    %dd = comm.all_to_all %dx split 1 {lancet.role = "dx"} : (tensor<2x8x8xf32>) -> tensor<4x4x8xf32>
    func.return %r, %dd, %dw : tensor<4x4x8xf32>, tensor<4x4x8xf32>, tensor<2x8x8xf32>
  }
}

// CHECK-LABEL: func.func @fwd_bwd
// CHECK:         %x_part0 = comm.all_to_all %{{.*}} concat 1 {lancet.role = "fwd", lancet.part = 0 : i64}
// CHECK:         %r = comp.concat %r_part0, %r_part1 {axis = 1 : i64, lancet.role = "fwd"}
// CHECK-NEXT:    %[[G0:.*]], %[[G1:.*]] = comp.split %g {axis = 1 : i64, num = 2 : i64, lancet.role = "dx"}
// CHECK-NEXT:    %dy_part0 = comm.all_to_all %[[G0]] concat 1 {lancet.role = "dx", lancet.part = 0 : i64}
// CHECK-NEXT:    %dy_part1 = comm.all_to_all %[[G1]] concat 1 {lancet.role = "dx", lancet.part = 1 : i64}
// CHECK-NEXT:    %dx_part0 = comp.batch_matmul_dx %dy_part0, %w {lancet.role = "dx", lancet.part = 0 : i64{{(, lancet.origin = .*)?}}}
// CHECK-NEXT:    %dw_part0 = comp.batch_matmul_dw %x_part0, %dy_part0 {lancet.role = "dw", lancet.part = 0 : i64{{(, lancet.origin = .*)?}}} : (tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> tensor<2x8x8xf32>
// CHECK-NEXT:    %dd_part0 = comm.all_to_all %dx_part0 split 1 {lancet.role = "dx", lancet.part = 0 : i64}
// CHECK-NEXT:    %dx_part1 = comp.batch_matmul_dx %dy_part1, %w {lancet.role = "dx", lancet.part = 1 : i64{{(, lancet.origin = .*)?}}}
// CHECK-NEXT:    %dw_part1 = comp.batch_matmul_dw %x_part1, %dy_part1 {lancet.role = "dw", lancet.part = 1 : i64{{(, lancet.origin = .*)?}}}
// CHECK-NEXT:    %dd_part1 = comm.all_to_all %dx_part1 split 1 {lancet.role = "dx", lancet.part = 1 : i64}
// CHECK-NEXT:    %dd = comp.concat %dd_part0, %dd_part1 {axis = 1 : i64, lancet.role = "dx"}
// CHECK-NEXT:    %dw = comp.add %dw_part0, %dw_part1 {in_place = true, lancet.role = "dw"{{(, lancet.origin = .*)?}}} : (tensor<2x8x8xf32>, tensor<2x8x8xf32>) -> tensor<2x8x8xf32>
// CHECK-NEXT:    func.return %r, %dd, %dw

// ONE-LABEL: func.func @fwd_bwd
// ONE-NOT:     lancet.part
// ONE:         func.return %r, %dd, %dw
