// RUN: lancet-opt %s --verify-diagnostics --split-input-file

%x = "test.op"() : () -> tensor<64x128xf32>
%y = comp.matmul %x, %x : (tensor<64x128xf32>, tensor<64x128xf32>) -> tensor<64x64xf32>
// expected-error@-1 {{comp.matmul: contraction dims differ: 128 vs 64}}

// -----

%x = "test.op"() : () -> tensor<64x128xf32>
%y = comp.matmul %x, %x {transpose_b = true} : (tensor<64x128xf32>, tensor<64x128xf32>) -> tensor<64x128xf32>
// expected-error@-1 {{comp.matmul: result #0 has type tensor<64x128xf32>, expected tensor<64x64xf32>}}

// -----

%x = "test.op"() : () -> tensor<64x128xf32>
%y = comp.matmul %x, %x {transpose_c = true} : (tensor<64x128xf32>, tensor<64x128xf32>) -> tensor<64x64xf32>
// expected-error@-1 {{comp.matmul: unknown parameter 'transpose_c' (allowed: transpose_a, transpose_b)}}

// -----

%x = "test.op"() : () -> tensor<64x128xf32>
%y = comp.matmul %x, %x {transpose_b = 1 : i64} : (tensor<64x128xf32>, tensor<64x128xf32>) -> tensor<64x64xf32>
// expected-error@-1 {{comp.matmul: parameter 'transpose_b' expects a bool (true or false), got 1 : i64}}

// -----

%x = "test.op"() : () -> tensor<6x4xf32>
%a, %b = comp.split %x {num = 4 : i64} : (tensor<6x4xf32>) -> (tensor<3x4xf32>, tensor<3x4xf32>)
// expected-error@-1 {{comp.split: cannot split dim 6 of tensor<6x4xf32> into 4 equal parts}}

// -----

%x = "test.op"() : () -> tensor<6x4xf32>
%a, %b = comp.split %x {num = 2 : i64, sizes = array<i64: 4, 1>} : (tensor<6x4xf32>) -> (tensor<4x4xf32>, tensor<1x4xf32>)
// expected-error@-1 {{comp.split: split sizes (4, 1) sum to 5, not to dim 6 of tensor<6x4xf32>}}

// -----

%x = "test.op"() : () -> tensor<6x4xf32>
%a, %b = comp.split %x {num = 2 : i64, sizes = array<i64: 6, 0>} : (tensor<6x4xf32>) -> (tensor<6x4xf32>, tensor<0x4xf32>)
// expected-error@-1 {{comp.split: split sizes (6, 0) must all be >= 1}}

// -----

%x = "test.op"() : () -> tensor<6x4xf32>
%a, %b = comp.split %x {num = 2 : i64, sizes = array<i64: 2, 2, 2>} : (tensor<6x4xf32>) -> (tensor<2x4xf32>, tensor<2x4xf32>)
// expected-error@-1 {{comp.split: split sizes (2, 2, 2) give 3 parts, not num = 2}}

// -----

%l = "test.op"() : () -> tensor<8x4xf32>
%c, %d = comp.moe_gate %l {gate = "top3", capacity = 2 : i64} : (tensor<8x4xf32>) -> (tensor<8x4x2xf32>, tensor<8x4x2xf32>)
// expected-error@-1 {{comp.moe_gate: parameter 'gate' must be one of switch, top2, got 'top3'}}

// -----

%l = "test.op"() : () -> tensor<8x4xf32>
%c, %d = comp.moe_gate %l : (tensor<8x4xf32>) -> (tensor<8x4x2xf32>, tensor<8x4x2xf32>)
// expected-error@-1 {{comp.moe_gate: missing required parameter 'capacity'}}

// -----

%l = "test.op"() : () -> tensor<8x4xf32>
%o = "test.op"() : () -> tensor<4xi64>
%c, %d, %n, %m = comp.moe_gate_window %l, %o {gate = "top2", capacity = 2 : i64} : (tensor<8x4xf32>, tensor<4xi64>) -> (tensor<8x4x2xf32>, tensor<8x4x2xf32>, tensor<4xi64>, tensor<4xi64>)
// expected-error@-1 {{comp.moe_gate_window: moe_gate_window supports the switch gate only: top2 places second choices after every token's first choice, so a part's slots depend on later tokens}}

// -----

%x = "test.op"() : () -> tensor<4x8xf32>
%y = comp.gelu %x, %x : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
// expected-error@-1 {{comp.gelu: expected 1 inputs, got 2}}

// -----

%x = "test.op"() : () -> tensor<4x8xf32>
%i = "test.op"() : () -> tensor<4xf32>
%l = comp.cross_entropy %x, %i : (tensor<4x8xf32>, tensor<4xf32>) -> tensor<f32>
// expected-error@-1 {{comp.cross_entropy: labels must have dtype i32 or i64, got f32}}
