// RUN: lancet-opt %s --allow-unregistered-dialect -p import-stablehlo --verify-diagnostics --split-input-file
// RUN: xdsl-opt %s --allow-unregistered-dialect -p import-stablehlo --verify-diagnostics --split-input-file | filecheck %s

// lancet-opt checks the expected-error lines (each error is placed at the HLO op it is
// about); xdsl-opt prints the diagnostics for FileCheck.

// A collective the importer cannot express fails the pass with one diagnostic naming the HLO op.
"func.func"() <{function_type = (tensor<4xf32>) -> tensor<4xf32>, sym_name = "bad"}> ({
^bb0(%x: tensor<4xf32>):
  // expected-error@+1 {{import-stablehlo: stablehlo.all_reduce: unsupported reduction 'stablehlo.xor'}}
  %1 = "stablehlo.all_reduce"(%x) ({
  ^bb1(%a: tensor<f32>, %b: tensor<f32>):
    %m = "stablehlo.xor"(%a, %b) : (tensor<f32>, tensor<f32>) -> tensor<f32>
    "stablehlo.return"(%m) : (tensor<f32>) -> ()
  }) {replica_groups = dense<[[0, 1]]> : tensor<1x2xi64>} : (tensor<4xf32>) -> tensor<4xf32>
  "func.return"(%1) : (tensor<4xf32>) -> ()
}) : () -> ()

// CHECK: import-stablehlo: stablehlo.all_reduce: unsupported reduction 'stablehlo.xor'

// -----

// replica_groups is required: a collective without it is not silently "all ranks".
"func.func"() <{function_type = (tensor<4xf32>) -> tensor<8xf32>, sym_name = "no_groups"}> ({
^bb0(%x: tensor<4xf32>):
  // expected-error@+1 {{import-stablehlo: stablehlo.all_gather: missing replica_groups}}
  %1 = "stablehlo.all_gather"(%x) {all_gather_dim = 0 : i64} : (tensor<4xf32>) -> tensor<8xf32>
  "func.return"(%1) : (tensor<8xf32>) -> ()
}) : () -> ()

// CHECK: import-stablehlo: stablehlo.all_gather: missing replica_groups

// -----

// A communication op with no comm spelling is rejected, not imported as compute.
"func.func"() <{function_type = (tensor<4xf32>) -> tensor<4xf32>, sym_name = "permute"}> ({
^bb0(%x: tensor<4xf32>):
  // expected-error@+1 {{import-stablehlo: stablehlo.collective_permute: unsupported collective}}
  %1 = "stablehlo.collective_permute"(%x) {source_target_pairs = dense<[[0, 1], [1, 0]]> : tensor<2x2xi64>} : (tensor<4xf32>) -> tensor<4xf32>
  "func.return"(%1) : (tensor<4xf32>) -> ()
}) : () -> ()

// CHECK: import-stablehlo: stablehlo.collective_permute: unsupported collective

// -----

// An async start whose done is missing: the pair cannot be matched.
"func.func"() <{function_type = (tensor<4xf32>) -> tensor<4xf32>, sym_name = "no_done"}> ({
^bb0(%x: tensor<4xf32>):
  // expected-error@+1 {{import-stablehlo: stablehlo.async_start: async token must have exactly one user, has 0}}
  %1 = "stablehlo.async_start"(%x) ({
    %2 = "stablehlo.all_gather"(%x) {all_gather_dim = 0 : i64, replica_groups = dense<[[0, 1]]> : tensor<1x2xi64>} : (tensor<4xf32>) -> tensor<8xf32>
    "stablehlo.return"(%2) : (tensor<8xf32>) -> ()
  }) : (tensor<4xf32>) -> !stablehlo.async_bundle
  "func.return"(%x) : (tensor<4xf32>) -> ()
}) : () -> ()

// CHECK: import-stablehlo: stablehlo.async_start: async token must have exactly one user, has 0

// -----

// A mismatched pair: the done returns a type the wrapped collective does not compute.
"func.func"() <{function_type = (tensor<4xf32>) -> tensor<4xf32>, sym_name = "mismatched"}> ({
^bb0(%x: tensor<4xf32>):
  %1 = "stablehlo.async_start"(%x) ({
    %2 = "stablehlo.all_gather"(%x) {all_gather_dim = 0 : i64, replica_groups = dense<[[0, 1]]> : tensor<1x2xi64>} : (tensor<4xf32>) -> tensor<8xf32>
    "stablehlo.return"(%2) : (tensor<8xf32>) -> ()
  }) : (tensor<4xf32>) -> !stablehlo.async_bundle
  // expected-error@+1 {{import-stablehlo: stablehlo.async_done: returns (tensor<4xf32>) but the wrapped stablehlo.all_gather computes (tensor<8xf32>)}}
  %3 = "stablehlo.async_done"(%1) : (!stablehlo.async_bundle) -> tensor<4xf32>
  "func.return"(%3) : (tensor<4xf32>) -> ()
}) : () -> ()

// CHECK: import-stablehlo: stablehlo.async_done: returns (tensor<4xf32>) but the wrapped stablehlo.all_gather computes (tensor<8xf32>)
