// RUN: lancet-opt %s -p 'moe-partition{axis=token parts=2}' | filecheck %s
// RUN: lancet-opt %s -p 'moe-partition{axis=token parts=2 extend=none}' | filecheck %s --check-prefix=CORE
// RUN: not lancet-opt %s -p 'moe-partition{axis=token parts=9}' 2>&1 | filecheck %s --check-prefix=BAD
// RUN: not lancet-opt %s -p 'moe-partition{axis=token extend=some}' 2>&1 | filecheck %s --check-prefix=OPT

// One MoE layer on 2 ranks: 4 experts (2 per rank), capacity 4, 8 tokens, hidden 8, with a
// layer norm and the gate's matmul before it and a residual add after it.
// axis=token parts=2 cuts the 8 tokens into 2 parts of 4 and runs the whole layer per part:
// the layer norm and the gate matmul (region before the gate) take the split input; part k's
// gate (moe_gate_window) reads the slot counter part k-1's gate left (part 0: zeros) and
// routes its tokens into a window; each window moves with comm.all_to_allv and its counts
// (reshaped [G, E/G]); the expert FFN and the exchanges carry lancet.fill = 0.5; part k's
// combine gives its 4 tokens, the residual add (region after the combine) runs per part,
// and one concat rebuilds the result, in place (each part's add writes its rows into the
// concat's buffer: no copy, costed 0). extend=none keeps the layer norm, the gate matmul
// and the add whole. 9 parts exceed the 8 tokens.
builtin.module attributes {lancet.world_size = 2 : i64} {
  func.func @moe(%x: tensor<8x8xf32>, %gam: tensor<8xf32>, %bet: tensor<8xf32>, %wg: tensor<8x4xf32>, %w: tensor<2x8x8xf32>, %r: tensor<8x8xf32>) -> tensor<8x8xf32> {
    %n = comp.layer_norm %x, %gam, %bet : (tensor<8x8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<8x8xf32>
    %l = comp.matmul %n, %wg : (tensor<8x8xf32>, tensor<8x4xf32>) -> tensor<8x4xf32>
    %c, %dm = comp.moe_gate %l {capacity = 4 : i64} : (tensor<8x4xf32>) -> (tensor<8x4x4xf32>, tensor<8x4x4xf32>)
    %d = comp.moe_dispatch %n, %dm : (tensor<8x8xf32>, tensor<8x4x4xf32>) -> tensor<4x4x8xf32>
    %e = comm.all_to_all %d concat 1 : (tensor<4x4x8xf32>) -> tensor<2x8x8xf32>
    %h = comp.batch_matmul %e, %w : (tensor<2x8x8xf32>, tensor<2x8x8xf32>) -> tensor<2x8x8xf32>
    %a = comp.gelu %h : (tensor<2x8x8xf32>) -> tensor<2x8x8xf32>
    %b = comm.all_to_all %a split 1 : (tensor<2x8x8xf32>) -> tensor<4x4x8xf32>
    %y = comp.moe_combine %b, %c : (tensor<4x4x8xf32>, tensor<8x4x4xf32>) -> tensor<8x8xf32>
    %o = comp.add %y, %r : (tensor<8x8xf32>, tensor<8x8xf32>) -> tensor<8x8xf32>
    func.return %o : tensor<8x8xf32>
  }
}

// CHECK-LABEL: func.func @moe
// CHECK:         %[[X0:.*]], %[[X1:.*]] = comp.split %x {num = 2 : i64{{(, lancet.origin = .*)?}}}
// CHECK:         %[[Z:.*]] = comp.zeros {shape = array<i64: 4>, dtype = "i64"{{(, lancet.origin = .*)?}}}
// CHECK:         %n_part0 = comp.layer_norm %[[X0]], %gam, %bet {lancet.part = 0 : i64{{(, lancet.origin = .*)?}}}
// CHECK:         %l_part0 = comp.matmul %n_part0, %wg {lancet.part = 0 : i64{{(, lancet.origin = .*)?}}}
// CHECK:         %c_part0, %dm_part0, %[[N0:.*]], %[[O1:.*]] = comp.moe_gate_window %l_part0, %[[Z]] {capacity = 4 : i64, lancet.part = 0 : i64{{(, lancet.origin = .*)?}}} : (tensor<4x4xf32>, tensor<4xi64>) -> (tensor<4x4x4xf32>, tensor<4x4x4xf32>, tensor<4xi64>, tensor<4xi64>)
// CHECK:         %[[K0:.*]] = comp.reshape %[[N0]] {shape = array<i64: 2, 2>, lancet.part = 0 : i64{{(, lancet.origin = .*)?}}}
// CHECK:         %d_part0 = comp.moe_dispatch %n_part0, %dm_part0 {lancet.part = 0 : i64{{(, lancet.origin = .*)?}}} : (tensor<4x8xf32>, tensor<4x4x4xf32>) -> tensor<4x4x8xf32>
// CHECK:         %[[S0:.*]] = comp.reshape %d_part0 {shape = array<i64: 2, 2, 4, 8>, lancet.part = 0 : i64, lancet.fill = 5.000000e-01 : f64{{(, lancet.origin = .*)?}}}
// CHECK:         %[[R0:.*]], %[[RC0:.*]] = comm.all_to_allv %[[S0]], %[[K0]] {lancet.part = 0 : i64, lancet.fill = 5.000000e-01 : f64} : (tensor<2x2x4x8xf32>, tensor<2x2xi64>) -> (tensor<2x2x4x8xf32>, tensor<2x2xi64>)
// CHECK:         %c_part1, %dm_part1, %{{.*}}, %{{.*}} = comp.moe_gate_window %l_part1, %[[O1]] {capacity = 4 : i64, lancet.part = 1 : i64{{(, lancet.origin = .*)?}}}
// CHECK:         %h_part0 = comp.batch_matmul %e_part0, %w {lancet.part = 0 : i64, lancet.fill = 5.000000e-01 : f64}
// CHECK:         %{{.*}}, %{{.*}} = comm.all_to_allv %{{.*}}, %[[RC0]] {lancet.part = 0 : i64, lancet.fill = 5.000000e-01 : f64}
// CHECK:         %y_part0 = comp.moe_combine %b_part0, %c_part0 {lancet.part = 0 : i64{{(, lancet.origin = .*)?}}} : (tensor<4x4x8xf32>, tensor<4x4x4xf32>) -> tensor<4x8xf32>
// CHECK:         %o_part0 = comp.add %y_part0, %{{.*}} {lancet.part = 0 : i64{{(, lancet.origin = .*)?}}}
// CHECK:         %o_part1 = comp.add %y_part1, %{{.*}} {lancet.part = 1 : i64{{(, lancet.origin = .*)?}}}
// CHECK-NEXT:    %o = comp.concat %o_part0, %o_part1 {in_place = true, lancet.origin = "comp.add;T<8x8xf32>,T<8x8xf32>,|T<8x8xf32>", lancet.origin_bytes = 768 : i64} : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<8x8xf32>
// CHECK-NEXT:    func.return %o
// CHECK-NOT:     comm.all_to_all %

// CORE:          %n = comp.layer_norm %x, %gam, %bet :
// CORE-NEXT:     %l = comp.matmul %n, %wg :
// CORE:          comp.moe_gate_window
// CORE:          %y = comp.concat %y_part0, %y_part1
// CORE-NEXT:     %o = comp.add %y, %r :

// BAD: moe-partition: 9 token parts exceed the 8 tokens of 'c'
// OPT: moe-partition: option extend must be one of none, forward, all, got some
