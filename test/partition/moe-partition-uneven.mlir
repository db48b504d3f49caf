// RUN: lancet-opt %s -p 'moe-partition{parts=3}' | filecheck %s
// RUN: lancet-opt %s -p 'moe-partition{parts=3}' | filecheck %s --check-prefix=A2A

// Three parts of a capacity of 4 slots: uneven parts of 2, 1 and 1 slots (the first
// 4 mod 3 parts get one slot more). Each part is a tensor of its own static type, so a
// plain all-to-all per part moves exactly its bytes. After the dispatch all-to-all the
// capacity axis holds 2 blocks (one per rank) of 4 slots, each cut 2, 1, 1: a value read
// across the border in blocks (%bias) is split per block with the same sizes, and a
// blocked result needed whole (%g, returned) is put back together block by block.
builtin.module attributes {lancet.world_size = 2 : i64} {
  func.func @moe(%x: tensor<8x8xf32>, %dm: tensor<8x4x4xf32>, %cm: tensor<8x4x4xf32>, %w: tensor<2x8x8xf32>, %bias: tensor<2x8x8xf32>) -> (tensor<8x8xf32>, tensor<2x8x8xf32>) {
    %d = comp.moe_dispatch %x, %dm : (tensor<8x8xf32>, tensor<8x4x4xf32>) -> tensor<4x4x8xf32>
    %e = comm.all_to_all %d concat 1 : (tensor<4x4x8xf32>) -> tensor<2x8x8xf32>
    %h = comp.batch_matmul %e, %w : (tensor<2x8x8xf32>, tensor<2x8x8xf32>) -> tensor<2x8x8xf32>
    %g = comp.add %h, %bias : (tensor<2x8x8xf32>, tensor<2x8x8xf32>) -> tensor<2x8x8xf32>
    %a = comp.gelu %g : (tensor<2x8x8xf32>) -> tensor<2x8x8xf32>
    %b = comm.all_to_all %a split 1 : (tensor<2x8x8xf32>) -> tensor<4x4x8xf32>
    %y = comp.moe_combine %b, %cm : (tensor<4x4x8xf32>, tensor<8x4x4xf32>) -> tensor<8x8xf32>
    func.return %y, %g : tensor<8x8xf32>, tensor<2x8x8xf32>
  }
}

// CHECK-LABEL: func.func @moe
// CHECK:      comp.split %dm {axis = 2 : i64, num = 3 : i64, sizes = array<i64: 2, 1, 1>{{(, lancet.origin = .*)?}}} : (tensor<8x4x4xf32>) -> (tensor<8x4x2xf32>, tensor<8x4x1xf32>, tensor<8x4x1xf32>)
// CHECK:      %[[B:.*]] = comp.reshape %bias {shape = array<i64: 2, 2, 4, 8>{{(, lancet.origin = .*)?}}}
// CHECK:      %[[B0:.*]], %[[B1:.*]], %[[B2:.*]] = comp.split %[[B]] {axis = 2 : i64, num = 3 : i64, sizes = array<i64: 2, 1, 1>{{(, lancet.origin = .*)?}}} : (tensor<2x2x4x8xf32>) -> (tensor<2x2x2x8xf32>, tensor<2x2x1x8xf32>, tensor<2x2x1x8xf32>)
// CHECK-NEXT: %[[P0:.*]] = comp.reshape %[[B0]] {shape = array<i64: 2, 4, 8>{{(, lancet.origin = .*)?}}}
// CHECK-NEXT: %[[P1:.*]] = comp.reshape %[[B1]] {shape = array<i64: 2, 2, 8>{{(, lancet.origin = .*)?}}}
// CHECK:      %g_part0 = comp.add %h_part0, %[[P0]] {lancet.part = 0 : i64{{(, lancet.origin = .*)?}}} : (tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
// CHECK:      %[[G0:.*]] = comp.reshape %g_part0 {shape = array<i64: 2, 2, 2, 8>{{(, lancet.origin = .*)?}}}
// CHECK:      %[[G1:.*]] = comp.reshape %g_part1 {shape = array<i64: 2, 2, 1, 8>{{(, lancet.origin = .*)?}}}
// CHECK:      %[[G2:.*]] = comp.reshape %g_part2 {shape = array<i64: 2, 2, 1, 8>{{(, lancet.origin = .*)?}}}
// CHECK-NEXT: %[[GC:.*]] = comp.concat %[[G0]], %[[G1]], %[[G2]] {axis = 2 : i64{{(, lancet.origin = .*)?}}} : (tensor<2x2x2x8xf32>, tensor<2x2x1x8xf32>, tensor<2x2x1x8xf32>) -> tensor<2x2x4x8xf32>
// CHECK-NEXT: %g = comp.reshape %[[GC]] {shape = array<i64: 2, 8, 8>{{(, lancet.origin = .*)?}}}
// CHECK:      %y = comp.add
// CHECK-NEXT: func.return %y, %g : tensor<8x8xf32>, tensor<2x8x8xf32>

// A2A-LABEL: func.func @moe
// A2A-DAG:   %e_part0 = comm.all_to_all %d_part0 concat 1 {lancet.part = 0 : i64} : (tensor<4x2x8xf32>) -> tensor<2x4x8xf32>
// A2A-DAG:   %e_part1 = comm.all_to_all %d_part1 concat 1 {lancet.part = 1 : i64} : (tensor<4x1x8xf32>) -> tensor<2x2x8xf32>
// A2A-DAG:   %e_part2 = comm.all_to_all %d_part2 concat 1 {lancet.part = 2 : i64} : (tensor<4x1x8xf32>) -> tensor<2x2x8xf32>
// A2A-DAG:   %b_part0 = comm.all_to_all %a_part0 split 1 {lancet.part = 0 : i64} : (tensor<2x4x8xf32>) -> tensor<4x2x8xf32>
// A2A-DAG:   %b_part1 = comm.all_to_all %a_part1 split 1 {lancet.part = 1 : i64} : (tensor<2x2x8xf32>) -> tensor<4x1x8xf32>
// A2A-DAG:   %b_part2 = comm.all_to_all %a_part2 split 1 {lancet.part = 2 : i64} : (tensor<2x2x8xf32>) -> tensor<4x1x8xf32>
