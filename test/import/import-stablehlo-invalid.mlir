// RUN: lancet-opt %s --allow-unregistered-dialect -p import-stablehlo --verify-diagnostics | filecheck %s
// RUN: xdsl-opt %s --allow-unregistered-dialect -p import-stablehlo --verify-diagnostics | filecheck %s

// A collective the importer cannot express fails the pass with one diagnostic naming the HLO op.
"func.func"() <{function_type = (tensor<4xf32>) -> tensor<4xf32>, sym_name = "bad"}> ({
^bb0(%x: tensor<4xf32>):
  %1 = "stablehlo.all_reduce"(%x) ({
  ^bb1(%a: tensor<f32>, %b: tensor<f32>):
    %m = "stablehlo.xor"(%a, %b) : (tensor<f32>, tensor<f32>) -> tensor<f32>
    "stablehlo.return"(%m) : (tensor<f32>) -> ()
  }) : (tensor<4xf32>) -> tensor<4xf32>
  "func.return"(%1) : (tensor<4xf32>) -> ()
}) : () -> ()

// CHECK: import-stablehlo: stablehlo.all_reduce: unsupported reduction 'stablehlo.xor'
