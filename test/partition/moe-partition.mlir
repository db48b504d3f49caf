// RUN: lancet-opt %s -p 'moe-partition{parts=2}' | filecheck %s
// RUN: lancet-opt %s -p 'moe-partition{parts=4}' | filecheck %s --check-prefix=FOUR
// RUN: not lancet-opt %s -p 'moe-partition{parts=8}' 2>&1 | filecheck %s --check-prefix=BAD

// One MoE layer on 2 ranks: 4 experts (2 per rank), capacity 4, 8 tokens, hidden 8.
// parts=2 splits the layer along the expert axis (part k = local expert k of every rank):
// the masks and expert weights are split at the border (the masks in blocks, one per
// rank), the dispatch, both all-to-alls and the experts run per part (lancet.part = k) in
// the phased pipeline order (part 1's all-to-all overlaps part 0's experts), and the
// combine gives per-part partial sums, added up for the residual add, which stays whole.
// parts=4 needs the capacity axis (2 experts per rank leave no room for 4); parts=8 leaves
// a part without rows on every axis and is refused.
// The border splits and the partial-sum add only move data: they name the op they come
// from (lancet.origin: the dispatch that reads the mask in parts, the combine whose partials
// are added) and the bytes its measured time moves (lancet.origin_bytes: the dispatch's
// 256 + 512 + 512 B, the combine's 512 + 512 + 256 B), so a profile costs them per byte.
builtin.module attributes {lancet.world_size = 2 : i64} {
  func.func @moe(%x: tensor<8x8xf32>, %dm: tensor<8x4x4xf32>, %cm: tensor<8x4x4xf32>, %w: tensor<2x8x8xf32>, %r: tensor<8x8xf32>) -> tensor<8x8xf32> {
    %d = comp.moe_dispatch %x, %dm : (tensor<8x8xf32>, tensor<8x4x4xf32>) -> tensor<4x4x8xf32>
    %e = comm.all_to_all %d concat 1 : (tensor<4x4x8xf32>) -> tensor<2x8x8xf32>
    %h = comp.batch_matmul %e, %w : (tensor<2x8x8xf32>, tensor<2x8x8xf32>) -> tensor<2x8x8xf32>
    %a = comp.gelu %h : (tensor<2x8x8xf32>) -> tensor<2x8x8xf32>
    %b = comm.all_to_all %a split 1 : (tensor<2x8x8xf32>) -> tensor<4x4x8xf32>
    %y = comp.moe_combine %b, %cm : (tensor<4x4x8xf32>, tensor<8x4x4xf32>) -> tensor<8x8xf32>
    %o = comp.add %y, %r : (tensor<8x8xf32>, tensor<8x8xf32>) -> tensor<8x8xf32>
    func.return %o : tensor<8x8xf32>
  }
}

// CHECK-LABEL: func.func @moe
// CHECK-NEXT:    %[[M:.*]] = comp.reshape %dm {shape = array<i64: 8, 2, 2, 4>, lancet.origin = "comp.moe_dispatch;T<8x8xf32>,T<8x4x4xf32>,|T<4x4x8xf32>", lancet.origin_bytes = 1280 : i64}
// CHECK-NEXT:    %[[W0:.*]], %[[W1:.*]] = comp.split %w {num = 2 : i64{{(, lancet.origin = .*)?}}}
// CHECK-NEXT:    %[[C:.*]] = comp.reshape %cm {shape = array<i64: 8, 2, 2, 4>{{(, lancet.origin = .*)?}}}
// CHECK-NEXT:    %[[M0:.*]], %[[M1:.*]] = comp.split %[[M]] {axis = 2 : i64, num = 2 : i64{{(, lancet.origin = .*)?}}}
// CHECK-NEXT:    %[[C0:.*]], %[[C1:.*]] = comp.split %[[C]] {axis = 2 : i64, num = 2 : i64{{(, lancet.origin = .*)?}}}
// CHECK-NEXT:    %[[DM0:.*]] = comp.reshape %[[M0]] {shape = array<i64: 8, 2, 4>{{(, lancet.origin = .*)?}}}
// CHECK-NEXT:    %[[DM1:.*]] = comp.reshape %[[M1]] {shape = array<i64: 8, 2, 4>{{(, lancet.origin = .*)?}}}
// CHECK-NEXT:    %[[CM0:.*]] = comp.reshape %[[C0]] {shape = array<i64: 8, 2, 4>{{(, lancet.origin = .*)?}}}
// CHECK-NEXT:    %[[CM1:.*]] = comp.reshape %[[C1]] {shape = array<i64: 8, 2, 4>{{(, lancet.origin = .*)?}}}
// a part records the op it came from and its share of the work (the profile's costing)
// CHECK-NEXT:    %d_part0 = comp.moe_dispatch %x, %[[DM0]] {lancet.part = 0 : i64, lancet.origin = "comp.moe_dispatch;T<8x8xf32>,T<8x4x4xf32>,|T<4x4x8xf32>", lancet.share = 5.000000e-01 : f64} : (tensor<8x8xf32>, tensor<8x2x4xf32>) -> tensor<2x4x8xf32>
// CHECK-NEXT:    %d_part1 = comp.moe_dispatch %x, %[[DM1]] {lancet.part = 1 : i64{{(, lancet.origin = .*)?}}}
// CHECK-NEXT:    %e_part0 = comm.all_to_all %d_part0 concat 1 {lancet.part = 0 : i64} : (tensor<2x4x8xf32>) -> tensor<1x8x8xf32>
// CHECK-NEXT:    %h_part0 = comp.batch_matmul %e_part0, %[[W0]] {lancet.part = 0 : i64{{(, lancet.origin = .*)?}}}
// CHECK-NEXT:    %e_part1 = comm.all_to_all %d_part1 concat 1 {lancet.part = 1 : i64}
// CHECK-NEXT:    %a_part0 = comp.gelu %h_part0 {lancet.part = 0 : i64{{(, lancet.origin = .*)?}}}
// CHECK-NEXT:    %h_part1 = comp.batch_matmul %e_part1, %[[W1]] {lancet.part = 1 : i64{{(, lancet.origin = .*)?}}}
// CHECK-NEXT:    %b_part0 = comm.all_to_all %a_part0 split 1 {lancet.part = 0 : i64} : (tensor<1x8x8xf32>) -> tensor<2x4x8xf32>
// CHECK-NEXT:    %a_part1 = comp.gelu %h_part1 {lancet.part = 1 : i64{{(, lancet.origin = .*)?}}}
// CHECK-NEXT:    %y_part0 = comp.moe_combine %b_part0, %[[CM0]] {lancet.part = 0 : i64{{(, lancet.origin = .*)?}}}
// CHECK-NEXT:    %b_part1 = comm.all_to_all %a_part1 split 1 {lancet.part = 1 : i64}
// CHECK-NEXT:    %y_part1 = comp.moe_combine %b_part1, %[[CM1]] {lancet.part = 1 : i64{{(, lancet.origin = .*)?}}}
// CHECK-NEXT:    %[[Y:.*]] = comp.add %y_part0, %y_part1 {lancet.origin = "comp.moe_combine;T<4x4x8xf32>,T<8x4x4xf32>,|T<8x8xf32>", lancet.origin_bytes = 1280 : i64} : (tensor<8x8xf32>, tensor<8x8xf32>) -> tensor<8x8xf32>
// CHECK-NEXT:    %o = comp.add %[[Y]], %r
// CHECK-NEXT:    func.return %o

// FOUR-LABEL: func.func @moe
// FOUR:          comp.split %dm {axis = 2 : i64, num = 4 : i64{{(, lancet.origin = .*)?}}}
// FOUR:          %e_part3 = comm.all_to_all %d_part3 concat 1 {lancet.part = 3 : i64} : (tensor<4x1x8xf32>) -> tensor<2x2x8xf32>
// FOUR:          %b_part3 = comm.all_to_all %a_part3 split 1 {lancet.part = 3 : i64} : (tensor<2x2x8xf32>) -> tensor<4x1x8xf32>
// FOUR:          = comp.add %{{[0-9]+}}, %y_part3 {lancet.origin = "comp.moe_combine;{{.*}}", lancet.origin_bytes = {{.*}}} : (tensor<8x8xf32>, tensor<8x8xf32>)
// FOUR-NEXT:     %o = comp.add

// BAD: lancet-opt: error: {{.*}}moe-partition: 8 parts exceed dimension 4 (2 blocks of 2) of 'd': one row per part at least
