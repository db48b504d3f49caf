// RUN: lancet-opt %s --verify-diagnostics --split-input-file -p data-parallel-schedule | filecheck %s

// A use before its definition is reported at the op that uses the value.
func.func @f(%a: tensor<8xf32>) -> tensor<8xf32> {
  // expected-error@+1 {{'comp.add' uses a result of 'comm.allreduce' (%r) before its definition}}
  %y = comp.add %r, %a : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
  %r = comm.allreduce %a : (tensor<8xf32>) -> tensor<8xf32>
  func.return %y : tensor<8xf32>
}

// -----

// A chunk without diagnostics is scheduled and printed as usual.
// CHECK:      func.func @g
// CHECK-NEXT:   %r = comm.allreduce %a
// CHECK-NEXT:   %y = comp.add %r, %a
func.func @g(%a: tensor<8xf32>) -> tensor<8xf32> {
  %r = comm.allreduce %a : (tensor<8xf32>) -> tensor<8xf32>
  %y = comp.add %r, %a : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
  func.return %y : tensor<8xf32>
}

// -----

func.func @h(%a: tensor<8xf32>) -> tensor<8xf32> {
  %r = comm.allreduce %a : (tensor<8xf32>) -> tensor<4xf32>
  // expected-error@above {{comm.allreduce: result #0 shape [4] must equal operand shape [8]}}
  func.return %a : tensor<8xf32>
}
