// RUN: lancet-opt %s -p "lancet-schedule{heuristic=fifo fusion=false max-seconds=0}" --split-input-file | filecheck %s
// RUN: lancet-opt %s -p "lancet-schedule{heuristic=fifo fusion=false max-seconds=0},simulate" --split-input-file | filecheck %s --check-prefix=SIM

// Lancet's profiled FIFO list schedule alone (lancet-algorithms.md §6.1; no dW stage, no
// fusion, no local search), times from
// lancet.time_us; the result is kept only if it simulates strictly faster.

// a(3) -> allreduce r(5) -> u(2), independent b(4). Input order a, r, u, b: 14 µs.
// List schedule: a [0,3]; then r [3,8] on the comm stream and b [3,7] on compute; u [8,10].
// Launch order a, b, r, u (at t=3 compute before comm): 10 µs.
func.func @hide_allreduce(%x: tensor<64xf32>) -> (tensor<64xf32>, tensor<64xf32>) {
  %a = "test.op"(%x) {lancet.time_us = 3.0 : f64} : (tensor<64xf32>) -> tensor<64xf32>
  %r = comm.allreduce %a {lancet.time_us = 5.0 : f64} : (tensor<64xf32>) -> tensor<64xf32>
  %u = "test.op"(%r) {lancet.time_us = 2.0 : f64} : (tensor<64xf32>) -> tensor<64xf32>
  %b = "test.op"(%x) {lancet.time_us = 4.0 : f64} : (tensor<64xf32>) -> tensor<64xf32>
  func.return %u, %b : tensor<64xf32>, tensor<64xf32>
}
// CHECK-LABEL: func.func @hide_allreduce
// CHECK-NEXT:    %a = "test.op"(%x)
// CHECK-NEXT:    %b = "test.op"(%x)
// CHECK-NEXT:    %r = comm.allreduce %a
// CHECK-NEXT:    %u = "test.op"(%r)
// CHECK-NEXT:    func.return %u, %b
// SIM-LABEL: func.func @hide_allreduce
// SIM-SAME:    lancet.makespan_us = 1.000000e+01 : f64, lancet.exposed_comm_us = 1.000000e+00 : f64

// -----

// a(3) -> r(5) -> u(2) and b(6) -> c(1) -> r2(5), input order a r u b c r2: 22 µs.
// List schedule: a [0,3]; r [3,8], b [3,9]; u (consumes an allreduce) is held;
// c [9,10]; r2 [10,15]; then u is released [15,17]. Launch order a b r c r2 u; replayed
// in fixed order u no longer waits for the release: u [10,12], makespan 15 < 22.
func.func @two_branches(%x: tensor<64xf32>) -> (tensor<64xf32>, tensor<64xf32>) {
  %a = "test.op"(%x) {lancet.time_us = 3.0 : f64} : (tensor<64xf32>) -> tensor<64xf32>
  %r = comm.allreduce %a {lancet.time_us = 5.0 : f64} : (tensor<64xf32>) -> tensor<64xf32>
  %u = "test.op"(%r) {lancet.time_us = 2.0 : f64} : (tensor<64xf32>) -> tensor<64xf32>
  %b = "test.op"(%x) {lancet.time_us = 6.0 : f64} : (tensor<64xf32>) -> tensor<64xf32>
  %c = "test.op"(%b) {lancet.time_us = 1.0 : f64} : (tensor<64xf32>) -> tensor<64xf32>
  %r2 = comm.allreduce %c {lancet.time_us = 5.0 : f64} : (tensor<64xf32>) -> tensor<64xf32>
  func.return %u, %r2 : tensor<64xf32>, tensor<64xf32>
}
// CHECK-LABEL: func.func @two_branches
// CHECK-NEXT:    %a = "test.op"(%x)
// CHECK-NEXT:    %b = "test.op"(%x)
// CHECK-NEXT:    %r = comm.allreduce %a
// CHECK-NEXT:    %c = "test.op"(%b)
// CHECK-NEXT:    %r2 = comm.allreduce %c
// CHECK-NEXT:    %u = "test.op"(%r)
// CHECK-NEXT:    func.return %u, %r2
// SIM-LABEL: func.func @two_branches
// SIM-SAME:    lancet.makespan_us = 1.500000e+01 : f64

// -----

// Never worse: the list schedule launches d (ready at 0) before c (ready at 5, after a),
// which delays the allreduce: a [0,5], b [5,6], d [6,7], c [7,8], r [8,9], u [9,11] = 11 µs,
// while the input order runs a [0,5], b [5,6], c [6,7], d [7,8], r [7,8], u [8,10] = 10 µs.
// The input order is kept.
func.func @keep_input(%x: tensor<64xf32>) -> (tensor<64xf32>, tensor<64xf32>) {
  %a = "test.op"(%x) {lancet.time_us = 5.0 : f64} : (tensor<64xf32>) -> tensor<64xf32>
  %b = "test.op"(%x) {lancet.time_us = 1.0 : f64} : (tensor<64xf32>) -> tensor<64xf32>
  %c = "test.op"(%a) {lancet.time_us = 1.0 : f64} : (tensor<64xf32>) -> tensor<64xf32>
  %d = "test.op"(%x) {lancet.time_us = 1.0 : f64} : (tensor<64xf32>) -> tensor<64xf32>
  %r:2 = comm.allreduce %b, %c {lancet.time_us = 1.0 : f64} : (tensor<64xf32>, tensor<64xf32>) -> (tensor<64xf32>, tensor<64xf32>)
  %u = "test.op"(%r#0, %r#1) {lancet.time_us = 2.0 : f64} : (tensor<64xf32>, tensor<64xf32>) -> tensor<64xf32>
  func.return %u, %d : tensor<64xf32>, tensor<64xf32>
}
// CHECK-LABEL: func.func @keep_input
// CHECK-NEXT:    %a = "test.op"(%x)
// CHECK-NEXT:    %b = "test.op"(%x)
// CHECK-NEXT:    %c = "test.op"(%a)
// CHECK-NEXT:    %d = "test.op"(%x)
// CHECK-NEXT:    %r, %r_1 = comm.allreduce %b, %c
// CHECK-NEXT:    %u = "test.op"(%r, %r_1)
// SIM-LABEL: func.func @keep_input
// SIM-SAME:    lancet.makespan_us = 1.000000e+01 : f64
