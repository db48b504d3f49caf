// RUN: lancet-opt %s -p delay-all-to-allv | filecheck %s

// Two all_to_allvs issued early, read late: each moves down to just before its first
// reader (the first one stays ahead of the second); one whose results nobody reads and
// one read only by the return go last, in program order.
builtin.module attributes {lancet.world_size = 2 : i64} {
  func.func @f(%d: tensor<2x4x8xf32>, %c: tensor<2xi64>, %x: tensor<8x8xf32>) -> (tensor<2x4x8xf32>, tensor<8x8xf32>, tensor<2x4x8xf32>) {
    %v, %vc = comm.all_to_allv %d, %c : (tensor<2x4x8xf32>, tensor<2xi64>) -> (tensor<2x4x8xf32>, tensor<2xi64>)
    %u, %uc = comm.all_to_allv %d, %c : (tensor<2x4x8xf32>, tensor<2xi64>) -> (tensor<2x4x8xf32>, tensor<2xi64>)
    %dead, %deadc = comm.all_to_allv %d, %c : (tensor<2x4x8xf32>, tensor<2xi64>) -> (tensor<2x4x8xf32>, tensor<2xi64>)
    %w, %wc = comm.all_to_allv %d, %c : (tensor<2x4x8xf32>, tensor<2xi64>) -> (tensor<2x4x8xf32>, tensor<2xi64>)
    %a = comp.gelu %x : (tensor<8x8xf32>) -> tensor<8x8xf32>
    %b = comp.gelu %a : (tensor<8x8xf32>) -> tensor<8x8xf32>
    %s = comp.add %u, %v : (tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
    %t = comp.gelu %b : (tensor<8x8xf32>) -> tensor<8x8xf32>
    func.return %s, %t, %w : tensor<2x4x8xf32>, tensor<8x8xf32>, tensor<2x4x8xf32>
  }
}

// CHECK-LABEL: func.func @f
// CHECK-NEXT:    %a = comp.gelu %x
// CHECK-NEXT:    %b = comp.gelu %a
// CHECK-NEXT:    %v, %vc = comm.all_to_allv %d, %c
// CHECK-NEXT:    %u, %uc = comm.all_to_allv %d, %c
// CHECK-NEXT:    %s = comp.add %u, %v
// CHECK-NEXT:    %t = comp.gelu %b
// CHECK-NEXT:    %dead, %deadc = comm.all_to_allv %d, %c
// CHECK-NEXT:    %w, %wc = comm.all_to_allv %d, %c
// CHECK-NEXT:    func.return %s, %t, %w
