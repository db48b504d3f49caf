// RUN: lancet-opt %s | filecheck %s
// RUN: lancet-opt %s --print-op-generic | lancet-opt | filecheck %s
// RUN: lancet-opt %s --print-op-generic | filecheck %s --check-prefix=GENERIC

func.func @layer(%x: tensor<64x128xf32>, %w: tensor<256x128xf32>, %g: tensor<128xf32>, %ids: tensor<64xi32>) -> tensor<f32> {
  %y = comp.matmul %x, %w {transpose_b = true, lancet.role = "fwd"} : (tensor<64x128xf32>, tensor<256x128xf32>) -> tensor<64x256xf32>
  %n = comp.layer_norm %x, %g, %g {eps = 1.0e-06 : f64} : (tensor<64x128xf32>, tensor<128xf32>, tensor<128xf32>) -> tensor<64x128xf32>
  %a = comp.gelu %n : (tensor<64x128xf32>) -> tensor<64x128xf32>
  %s = comp.softmax %y {causal = false} : (tensor<64x256xf32>) -> tensor<64x256xf32>
  %h = comp.reshape %a {shape = array<i64: 4, 16, 128>} : (tensor<64x128xf32>) -> tensor<4x16x128xf32>
  %t = comp.transpose %h {perm = array<i64: 0, 2, 1>} : (tensor<4x16x128xf32>) -> tensor<4x128x16xf32>
  %q = comp.batch_matmul %h, %t : (tensor<4x16x128xf32>, tensor<4x128x16xf32>) -> tensor<4x16x16xf32>
  %p0, %p1 = comp.split %x {axis = 1 : i64, num = 2 : i64} : (tensor<64x128xf32>) -> (tensor<64x64xf32>, tensor<64x64xf32>)
  %c = comp.concat %p1, %p0 {axis = 1 : i64} : (tensor<64x64xf32>, tensor<64x64xf32>) -> tensor<64x128xf32>
  %u0, %u1, %u2 = comp.split %x {num = 3 : i64, sizes = array<i64: 22, 21, 21>} : (tensor<64x128xf32>) -> (tensor<22x128xf32>, tensor<21x128xf32>, tensor<21x128xf32>)
  %uc = comp.concat %u0, %u1, %u2 : (tensor<22x128xf32>, tensor<21x128xf32>, tensor<21x128xf32>) -> tensor<64x128xf32>
  %loss = comp.cross_entropy %y, %ids : (tensor<64x256xf32>, tensor<64xi32>) -> tensor<f32>
  func.return %loss : tensor<f32>
}

// CHECK-LABEL: func.func @layer
// CHECK-NEXT:    %y = comp.matmul %x, %w {transpose_b = true, lancet.role = "fwd"} : (tensor<64x128xf32>, tensor<256x128xf32>) -> tensor<64x256xf32>
// CHECK-NEXT:    %n = comp.layer_norm %x, %g, %g {eps = 1.000000e-06 : f64} : (tensor<64x128xf32>, tensor<128xf32>, tensor<128xf32>) -> tensor<64x128xf32>
// CHECK-NEXT:    %a = comp.gelu %n : (tensor<64x128xf32>) -> tensor<64x128xf32>
// CHECK-NEXT:    %s = comp.softmax %y {causal = false} : (tensor<64x256xf32>) -> tensor<64x256xf32>
// CHECK-NEXT:    %h = comp.reshape %a {shape = array<i64: 4, 16, 128>} : (tensor<64x128xf32>) -> tensor<4x16x128xf32>
// CHECK-NEXT:    %t = comp.transpose %h {perm = array<i64: 0, 2, 1>} : (tensor<4x16x128xf32>) -> tensor<4x128x16xf32>
// CHECK-NEXT:    %q = comp.batch_matmul %h, %t : (tensor<4x16x128xf32>, tensor<4x128x16xf32>) -> tensor<4x16x16xf32>
// CHECK-NEXT:    %p0, %p1 = comp.split %x {axis = 1 : i64, num = 2 : i64} : (tensor<64x128xf32>) -> (tensor<64x64xf32>, tensor<64x64xf32>)
// CHECK-NEXT:    %c = comp.concat %p1, %p0 {axis = 1 : i64} : (tensor<64x64xf32>, tensor<64x64xf32>) -> tensor<64x128xf32>
// CHECK-NEXT:    %u0, %u1, %u2 = comp.split %x {num = 3 : i64, sizes = array<i64: 22, 21, 21>} : (tensor<64x128xf32>) -> (tensor<22x128xf32>, tensor<21x128xf32>, tensor<21x128xf32>)
// CHECK-NEXT:    %uc = comp.concat %u0, %u1, %u2 : (tensor<22x128xf32>, tensor<21x128xf32>, tensor<21x128xf32>) -> tensor<64x128xf32>
// CHECK-NEXT:    %loss = comp.cross_entropy %y, %ids : (tensor<64x256xf32>, tensor<64xi32>) -> tensor<f32>
// CHECK-NEXT:    func.return %loss : tensor<f32>

// GENERIC: %y = "comp.matmul"(%x, %w) <{transpose_b = true}> {lancet.role = "fwd"} : (tensor<64x128xf32>, tensor<256x128xf32>) -> tensor<64x256xf32>
// GENERIC: "comp.split"(%x) <{num = 3 : i64, sizes = array<i64: 22, 21, 21>}> : (tensor<64x128xf32>) -> (tensor<22x128xf32>, tensor<21x128xf32>, tensor<21x128xf32>)
// GENERIC: %loss = "comp.cross_entropy"(%y, %ids) : (tensor<64x256xf32>, tensor<64xi32>) -> tensor<f32>

func.func @moe_and_update(%x: tensor<8x16xf32>, %wg: tensor<16x4xf32>, %e: tensor<4x4x16xf32>, %p: tensor<16x4xf32>) {
  %logits = comp.matmul %x, %wg : (tensor<8x16xf32>, tensor<16x4xf32>) -> tensor<8x4xf32>
  %comb, %disp = comp.moe_gate %logits {gate = "top2", capacity = 4 : i64} : (tensor<8x4xf32>) -> (tensor<8x4x4xf32>, tensor<8x4x4xf32>)
  %buf = comp.moe_dispatch %x, %disp : (tensor<8x16xf32>, tensor<8x4x4xf32>) -> tensor<4x4x16xf32>
  %out = comp.moe_combine %e, %comb : (tensor<4x4x16xf32>, tensor<8x4x4xf32>) -> tensor<8x16xf32>
  %db = comp.reduce_sum %out {axes = array<i64: 0>} : (tensor<8x16xf32>) -> tensor<16xf32>
  %z = comp.zeros {shape = array<i64: 16, 4>} : () -> tensor<16x4xf32>
  %np, %nm, %nv = comp.adam_update %p, %p, %z, %z {lr = 1.0e-04, step = 2 : i64} : (tensor<16x4xf32>, tensor<16x4xf32>, tensor<16x4xf32>, tensor<16x4xf32>) -> (tensor<16x4xf32>, tensor<16x4xf32>, tensor<16x4xf32>)
  // parameters are properties: the custom form also reads MLIR's `<{...}>` spelling
  %sc = comp.scale %np <{alpha = 5.0e-01 : f64}> {lancet.role = "update"} : (tensor<16x4xf32>) -> tensor<16x4xf32>
  func.return
}

// CHECK-LABEL: func.func @moe_and_update
// CHECK-NEXT:    %logits = comp.matmul %x, %wg : (tensor<8x16xf32>, tensor<16x4xf32>) -> tensor<8x4xf32>
// CHECK-NEXT:    %comb, %disp = comp.moe_gate %logits {gate = "top2", capacity = 4 : i64} : (tensor<8x4xf32>) -> (tensor<8x4x4xf32>, tensor<8x4x4xf32>)
// CHECK-NEXT:    %buf = comp.moe_dispatch %x, %disp : (tensor<8x16xf32>, tensor<8x4x4xf32>) -> tensor<4x4x16xf32>
// CHECK-NEXT:    %out = comp.moe_combine %e, %comb : (tensor<4x4x16xf32>, tensor<8x4x4xf32>) -> tensor<8x16xf32>
// CHECK-NEXT:    %db = comp.reduce_sum %out {axes = array<i64: 0>} : (tensor<8x16xf32>) -> tensor<16xf32>
// CHECK-NEXT:    %z = comp.zeros {shape = array<i64: 16, 4>} : () -> tensor<16x4xf32>
// CHECK-NEXT:    %np, %nm, %nv = comp.adam_update %p, %p, %z, %z {lr = 1.000000e-04 : f64, step = 2 : i64} : (tensor<16x4xf32>, tensor<16x4xf32>, tensor<16x4xf32>, tensor<16x4xf32>) -> (tensor<16x4xf32>, tensor<16x4xf32>, tensor<16x4xf32>)
// CHECK-NEXT:    %sc = comp.scale %np {alpha = 5.000000e-01 : f64, lancet.role = "update"} : (tensor<16x4xf32>) -> tensor<16x4xf32>
// CHECK-NEXT:    func.return

// GENERIC: %z = "comp.zeros"() <{shape = array<i64: 16, 4>}> : () -> tensor<16x4xf32>
// GENERIC: %sc = "comp.scale"(%np) <{alpha = 5.000000e-01 : f64}> {lancet.role = "update"} : (tensor<16x4xf32>) -> tensor<16x4xf32>

// one token part of a switch-gated MoE layer: window gate, per-window dispatch, its gradient
func.func @gate_window(%logits: tensor<6x4xf32>, %off: tensor<4xi64>, %x: tensor<6x16xf32>) -> (tensor<4xi64>, tensor<6x4xf32>) {
  %comb, %disp, %counts, %next = comp.moe_gate_window %logits, %off {capacity = 3 : i64} : (tensor<6x4xf32>, tensor<4xi64>) -> (tensor<6x4x3xf32>, tensor<6x4x3xf32>, tensor<4xi64>, tensor<4xi64>)
  %buf = comp.moe_dispatch %x, %disp : (tensor<6x16xf32>, tensor<6x4x3xf32>) -> tensor<4x3x16xf32>
  %dl = comp.moe_gate_window_dx %comb, %logits, %off {capacity = 3 : i64} : (tensor<6x4x3xf32>, tensor<6x4xf32>, tensor<4xi64>) -> tensor<6x4xf32>
  func.return %next, %dl : tensor<4xi64>, tensor<6x4xf32>
}

// CHECK-LABEL: func.func @gate_window
// CHECK-NEXT:    %comb, %disp, %counts, %next = comp.moe_gate_window %logits, %off {capacity = 3 : i64} : (tensor<6x4xf32>, tensor<4xi64>) -> (tensor<6x4x3xf32>, tensor<6x4x3xf32>, tensor<4xi64>, tensor<4xi64>)
// CHECK-NEXT:    %buf = comp.moe_dispatch %x, %disp : (tensor<6x16xf32>, tensor<6x4x3xf32>) -> tensor<4x3x16xf32>
// CHECK-NEXT:    %dl = comp.moe_gate_window_dx %comb, %logits, %off {capacity = 3 : i64} : (tensor<6x4x3xf32>, tensor<6x4xf32>, tensor<4xi64>) -> tensor<6x4xf32>
// CHECK-NEXT:    func.return %next, %dl : tensor<4xi64>, tensor<6x4xf32>

// GENERIC: %comb, %disp, %counts, %next = "comp.moe_gate_window"(%logits, %off) <{capacity = 3 : i64}> : (tensor<6x4xf32>, tensor<4xi64>) -> (tensor<6x4x3xf32>, tensor<6x4x3xf32>, tensor<4xi64>, tensor<4xi64>)
