// RUN: lancet-opt %s -p lancet-schedule --split-input-file | filecheck %s
// RUN: lancet-opt %s -p lancet-schedule,simulate --split-input-file | filecheck %s --check-prefix=SIM
// RUN: lancet-opt %s -p 'lancet-schedule{fusion=false}' --verbose -o /dev/null --split-input-file 2>&1 | filecheck %s --check-prefix=LOG

// The whole pipeline (lancet-algorithms.md §1.4), times from lancet.time_us.
// dX chain c0(2) -> a1(6) -> e(3) -> a2(6) -> g(2); w0(4) independent -> r0(3) -> u0(1);
// w1(5) after a1 -> r1(2) -> u1(1). Program order 35 µs, FIFO and dW placement 21 µs.
// The local search also runs the update u0 in a2's window (r0 ends at 11):
// c0 [0,2]; a1 [2,8] w0 [2,6]; e [8,11] r0 [8,11]; a2 [11,17] w1 [11,16] u0 [16,17];
// g [17,19] r1 [17,19]; u1 [19,20]. 20 µs is the optimum (exact branch and bound).
func.func @backward(%x: tensor<64xf32>, %h: tensor<64xf32>) -> (tensor<64xf32>, tensor<64xf32>, tensor<64xf32>) {
  %c0 = "test.op"(%x) {lancet.time_us = 2.0 : f64} : (tensor<64xf32>) -> tensor<64xf32>
  %w0 = "test.op"(%h) {lancet.time_us = 4.0 : f64} : (tensor<64xf32>) -> tensor<64xf32>
  %r0 = comm.allreduce %w0 {lancet.time_us = 3.0 : f64} : (tensor<64xf32>) -> tensor<64xf32>
  %a1 = comm.all_to_all %c0 {lancet.time_us = 6.0 : f64} : (tensor<64xf32>) -> tensor<64xf32>
  %e = "test.op"(%a1) {lancet.time_us = 3.0 : f64} : (tensor<64xf32>) -> tensor<64xf32>
  %w1 = "test.op"(%a1) {lancet.time_us = 5.0 : f64} : (tensor<64xf32>) -> tensor<64xf32>
  %r1 = comm.allreduce %w1 {lancet.time_us = 2.0 : f64} : (tensor<64xf32>) -> tensor<64xf32>
  %a2 = comm.all_to_all %e {lancet.time_us = 6.0 : f64} : (tensor<64xf32>) -> tensor<64xf32>
  %g = "test.op"(%a2) {lancet.time_us = 2.0 : f64} : (tensor<64xf32>) -> tensor<64xf32>
  %u0 = "test.op"(%r0) {lancet.time_us = 1.0 : f64} : (tensor<64xf32>) -> tensor<64xf32>
  %u1 = "test.op"(%r1) {lancet.time_us = 1.0 : f64} : (tensor<64xf32>) -> tensor<64xf32>
  func.return %g, %u0, %u1 : tensor<64xf32>, tensor<64xf32>, tensor<64xf32>
}
// CHECK-LABEL: func.func @backward
// CHECK-NEXT:    %c0 = "test.op"(%x)
// CHECK-NEXT:    %w0 = "test.op"(%h)
// CHECK-NEXT:    %a1 = comm.all_to_all %c0
// CHECK-NEXT:    %e = "test.op"(%a1)
// CHECK-NEXT:    %r0 = comm.allreduce %w0
// CHECK-NEXT:    %w1 = "test.op"(%a1)
// CHECK-NEXT:    %a2 = comm.all_to_all %e
// CHECK-NEXT:    %u0 = "test.op"(%r0)
// CHECK-NEXT:    %g = "test.op"(%a2)
// CHECK-NEXT:    %r1 = comm.allreduce %w1
// CHECK-NEXT:    %u1 = "test.op"(%r1)
// SIM-LABEL: func.func @backward
// SIM-SAME:    lancet.makespan_us = 2.000000e+01 : f64
// Exposed communication: input r0 [6,9] a1 [9,15] r1 [23,25] a2 [25,31] = 17 µs; FIFO and
// dW placement (same order here) leave [6,8] and [16,17]; the final schedule only [6,8].
// LOG: lancet-schedule @backward: input: makespan 35.0 us, exposed comm 17.0 us
// LOG-NEXT: lancet-schedule @backward: list schedule: makespan 21.0 us, exposed comm 3.0 us
// LOG-NEXT: lancet-schedule @backward: dw placement: makespan 21.0 us, exposed comm 3.0 us
// LOG-NEXT: lancet-schedule @backward: local search: makespan 20.0 us, exposed comm 2.0 us
// LOG-NOT: lancet-schedule @backward

// -----

// An op with regions costs its body as scheduled, times a static trip count: the scf.for
// runs its 10 µs body 4 times (40 µs). In the input order it waits behind u for the 30 µs
// all-reduce (g [0,1] r [1,31] u [31,32] loop [32,72]: 72 µs); placed before u it runs under
// the all-reduce (loop [1,41] u [41,42]: 42 µs). Costed by the cost model alone the loop took
// 0 µs, both orders 32 µs, and the pass kept the input.
func.func @loop_beside_allreduce(%x: tensor<64xf32>) -> tensor<64xf32> {
  %lb = arith.constant 0 : index
  %ub = arith.constant 4 : index
  %st = arith.constant 1 : index
  %g = "test.op"(%x) {lancet.time_us = 1.0 : f64} : (tensor<64xf32>) -> tensor<64xf32>
  %r = comm.allreduce %g {lancet.time_us = 30.0 : f64} : (tensor<64xf32>) -> tensor<64xf32>
  %u = "test.op"(%r) {lancet.time_us = 1.0 : f64} : (tensor<64xf32>) -> tensor<64xf32>
  scf.for %k = %lb to %ub step %st {
    %i = "test.op"(%x) {lancet.time_us = 10.0 : f64} : (tensor<64xf32>) -> tensor<64xf32>
    %j = "test.op"(%i) {lancet.time_us = 0.0 : f64} : (tensor<64xf32>) -> tensor<64xf32>
  }
  func.return %u : tensor<64xf32>
}
// CHECK-LABEL: func.func @loop_beside_allreduce
// CHECK:         %g = "test.op"(%x)
// CHECK-NEXT:    scf.for %k = %lb to %ub step %st {
// CHECK:         %r = comm.allreduce %g
// CHECK-NEXT:    %u = "test.op"(%r)
// SIM-LABEL: func.func @loop_beside_allreduce
// SIM-SAME:    lancet.makespan_us = 4.200000e+01 : f64
// The loop body is scheduled first (innermost first), then the block holding the loop.
// LOG: lancet-schedule @loop_beside_allreduce/scf.for#0: input: makespan 10.0 us, exposed comm 0.0 us
// LOG: lancet-schedule @loop_beside_allreduce: input: makespan 72.0 us, exposed comm 30.0 us
// LOG-NEXT: lancet-schedule @loop_beside_allreduce: list schedule: makespan 42.0 us, exposed comm 0.0 us
// LOG: lancet-schedule @loop_beside_allreduce: never worse: kept fifo: makespan 42.0 us, exposed comm 0.0 us
