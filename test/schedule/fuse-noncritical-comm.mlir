// RUN: lancet-opt %s -p fuse-noncritical-comm --split-input-file | filecheck %s
// RUN: lancet-opt %s -p fuse-noncritical-comm,simulate --split-input-file | filecheck %s --check-prefix=SIM

// Lancet's non-critical all-reduce fusion (lancet-algorithms.md §7.5). Compute times from
// lancet.time_us; the all-reduces (8 ranks) are priced by the default (h100) comm table:
// 256 and 512 bytes 36.46 µs, 4 MiB 68.67 µs, 8 MiB 104.7 µs.
// r1 [1,37.46] and r2 [37.46,73.92] run under the 100 µs compute op %c: merged, the fused op
// [2,38.46] still ends long before u1 and u2 need it; makespan 104 µs either way, one op fewer.
module attributes {lancet.world_size = 8 : i64} {
func.func @off_critical_path(%x: tensor<64xf32>, %y: tensor<64xf32>) -> (tensor<64xf32>, tensor<64xf32>, tensor<64xf32>) {
  %w1 = "test.op"(%x) {lancet.time_us = 1.0 : f64} : (tensor<64xf32>) -> tensor<64xf32>
  %w2 = "test.op"(%y) {lancet.time_us = 1.0 : f64} : (tensor<64xf32>) -> tensor<64xf32>
  %r1 = comm.allreduce %w1 : (tensor<64xf32>) -> tensor<64xf32>
  %r2 = comm.allreduce %w2 : (tensor<64xf32>) -> tensor<64xf32>
  %c = "test.op"(%x) {lancet.time_us = 100.0 : f64} : (tensor<64xf32>) -> tensor<64xf32>
  %u1 = "test.op"(%r1) {lancet.time_us = 1.0 : f64} : (tensor<64xf32>) -> tensor<64xf32>
  %u2 = "test.op"(%r2) {lancet.time_us = 1.0 : f64} : (tensor<64xf32>) -> tensor<64xf32>
  func.return %u1, %u2, %c : tensor<64xf32>, tensor<64xf32>, tensor<64xf32>
}
}
// CHECK-LABEL: func.func @off_critical_path
// CHECK-NEXT:    %w1 = "test.op"(%x)
// CHECK-NEXT:    %w2 = "test.op"(%y)
// CHECK-NEXT:    %c = "test.op"(%x)
// CHECK-NEXT:    %r1, %r2 = comm.allreduce %w1, %w2
// CHECK-NEXT:    %u1 = "test.op"(%r1)
// CHECK-NEXT:    %u2 = "test.op"(%r2)
// SIM-LABEL: func.func @off_critical_path
// SIM-SAME:    lancet.makespan_us = 1.040000e+02 : f64

// -----

// 4 MiB gradients: r1 [1,69.67] u1 [69.67,119.67], r2 [69.67,138.34] u2 [138.34,139.34] is
// 139.34 µs; the fused op [2,106.7] would hold u1 back: 157.7 µs; nothing is merged.
module attributes {lancet.world_size = 8 : i64} {
func.func @on_critical_path(%x: tensor<1048576xf32>, %y: tensor<1048576xf32>) -> (tensor<1048576xf32>, tensor<1048576xf32>, tensor<1048576xf32>) {
  %w1 = "test.op"(%x) {lancet.time_us = 1.0 : f64} : (tensor<1048576xf32>) -> tensor<1048576xf32>
  %w2 = "test.op"(%y) {lancet.time_us = 1.0 : f64} : (tensor<1048576xf32>) -> tensor<1048576xf32>
  %r1 = comm.allreduce %w1 : (tensor<1048576xf32>) -> tensor<1048576xf32>
  %r2 = comm.allreduce %w2 : (tensor<1048576xf32>) -> tensor<1048576xf32>
  %c = "test.op"(%x) {lancet.time_us = 1.0 : f64} : (tensor<1048576xf32>) -> tensor<1048576xf32>
  %u1 = "test.op"(%r1) {lancet.time_us = 50.0 : f64} : (tensor<1048576xf32>) -> tensor<1048576xf32>
  %u2 = "test.op"(%r2) {lancet.time_us = 1.0 : f64} : (tensor<1048576xf32>) -> tensor<1048576xf32>
  func.return %u1, %u2, %c : tensor<1048576xf32>, tensor<1048576xf32>, tensor<1048576xf32>
}
}
// CHECK-LABEL: func.func @on_critical_path
// CHECK-NEXT:    %w1 = "test.op"(%x)
// CHECK-NEXT:    %w2 = "test.op"(%y)
// CHECK-NEXT:    %r1 = comm.allreduce %w1
// CHECK-NEXT:    %r2 = comm.allreduce %w2
// CHECK-NEXT:    %c = "test.op"(%x)
// SIM-LABEL: func.func @on_critical_path
// SIM-SAME:    lancet.makespan_us = 1.393440e+02 : f64

// -----

// An op with regions costs its body: the scf.execute_region runs a 100 µs op on the compute
// stream, so u1 (50 µs) starts at 102 whether r1 and r2 are merged or not (the fused op
// [2,38.46]): 153 µs either way, one op fewer. Costed by the cost model alone the region took
// 0 µs: unfused u1 [37.46,87.46] u2 [87.46,88.46], fused u1 [38.46,88.46] u2 [88.46,89.46],
// and nothing merged.
module attributes {lancet.world_size = 8 : i64} {
func.func @under_a_region(%x: tensor<64xf32>, %y: tensor<64xf32>) -> (tensor<64xf32>, tensor<64xf32>, tensor<64xf32>) {
  %w1 = "test.op"(%x) {lancet.time_us = 1.0 : f64} : (tensor<64xf32>) -> tensor<64xf32>
  %w2 = "test.op"(%y) {lancet.time_us = 1.0 : f64} : (tensor<64xf32>) -> tensor<64xf32>
  %r1 = comm.allreduce %w1 : (tensor<64xf32>) -> tensor<64xf32>
  %r2 = comm.allreduce %w2 : (tensor<64xf32>) -> tensor<64xf32>
  %c = "scf.execute_region"() ({
    %i = "test.op"(%x) {lancet.time_us = 100.0 : f64} : (tensor<64xf32>) -> tensor<64xf32>
    scf.yield %i : tensor<64xf32>
  }) : () -> tensor<64xf32>
  %u1 = "test.op"(%r1) {lancet.time_us = 50.0 : f64} : (tensor<64xf32>) -> tensor<64xf32>
  %u2 = "test.op"(%r2) {lancet.time_us = 1.0 : f64} : (tensor<64xf32>) -> tensor<64xf32>
  func.return %u1, %u2, %c : tensor<64xf32>, tensor<64xf32>, tensor<64xf32>
}
}
// CHECK-LABEL: func.func @under_a_region
// CHECK-NEXT:    %w1 = "test.op"(%x)
// CHECK-NEXT:    %w2 = "test.op"(%y)
// CHECK-NEXT:    %c = scf.execute_region
// CHECK:         %r1, %r2 = comm.allreduce %w1, %w2
// CHECK-NEXT:    %u1 = "test.op"(%r1)
// CHECK-NEXT:    %u2 = "test.op"(%r2)
// SIM-LABEL: func.func @under_a_region
// SIM-SAME:    lancet.makespan_us = 1.530000e+02 : f64

// -----

// The first case with measured all-reduces (lancet.time_us, as every imported NCCL kernel has:
// the time includes waiting for the peers, which no price of a fused op can know): never
// merged, though merging would not make the 104 µs makespan worse.
module attributes {lancet.world_size = 8 : i64} {
func.func @measured(%x: tensor<64xf32>, %y: tensor<64xf32>) -> (tensor<64xf32>, tensor<64xf32>, tensor<64xf32>) {
  %w1 = "test.op"(%x) {lancet.time_us = 1.0 : f64} : (tensor<64xf32>) -> tensor<64xf32>
  %w2 = "test.op"(%y) {lancet.time_us = 1.0 : f64} : (tensor<64xf32>) -> tensor<64xf32>
  %r1 = comm.allreduce %w1 {lancet.time_us = 20.0 : f64} : (tensor<64xf32>) -> tensor<64xf32>
  %r2 = comm.allreduce %w2 {lancet.time_us = 20.0 : f64} : (tensor<64xf32>) -> tensor<64xf32>
  %c = "test.op"(%x) {lancet.time_us = 100.0 : f64} : (tensor<64xf32>) -> tensor<64xf32>
  %u1 = "test.op"(%r1) {lancet.time_us = 1.0 : f64} : (tensor<64xf32>) -> tensor<64xf32>
  %u2 = "test.op"(%r2) {lancet.time_us = 1.0 : f64} : (tensor<64xf32>) -> tensor<64xf32>
  func.return %u1, %u2, %c : tensor<64xf32>, tensor<64xf32>, tensor<64xf32>
}
}
// CHECK-LABEL: func.func @measured
// CHECK-NEXT:    %w1 = "test.op"(%x)
// CHECK-NEXT:    %w2 = "test.op"(%y)
// CHECK-NEXT:    %r1 = comm.allreduce %w1 {lancet.time_us = 2.000000e+01 : f64}
// CHECK-NEXT:    %r2 = comm.allreduce %w2 {lancet.time_us = 2.000000e+01 : f64}
// CHECK-NEXT:    %c = "test.op"(%x)
// SIM-LABEL: func.func @measured
// SIM-SAME:    lancet.makespan_us = 1.040000e+02 : f64
