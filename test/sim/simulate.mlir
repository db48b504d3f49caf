// RUN: lancet-opt %s -p simulate --split-input-file | filecheck %s
// RUN: lancet-opt %s -p 'simulate{overlap-slowdown=1.5}' --split-input-file | filecheck %s --check-prefix=SLOW
// RUN: lancet-opt %s -p 'simulate{comm-streams=2}' --split-input-file | filecheck %s --check-prefix=TWO
// RUN: lancet-opt %s --overlap-slowdown 1.5 -p simulate --split-input-file | filecheck %s --check-prefix=SLOW

// Hand-computed timelines (times from lancet.time_us). Block order is launch order:
// compute ops on stream 0, collectives on stream 1; an op starts when its stream is free
// and its producers have ended.

// a(3) -> allreduce r(5) -> u(2), independent b(4), in the order a, r, u, b:
// a [0,3], r [3,8], u [8,10], b [10,14]. Comm [3,8] overlaps no compute: 5 exposed.
func.func @serial(%x: tensor<64xf32>) -> (tensor<64xf32>, tensor<64xf32>) {
  %a = "test.op"(%x) {lancet.time_us = 3.0 : f64} : (tensor<64xf32>) -> tensor<64xf32>
  %r = comm.allreduce %a {lancet.time_us = 5.0 : f64} : (tensor<64xf32>) -> tensor<64xf32>
  %u = "test.op"(%r) {lancet.time_us = 2.0 : f64} : (tensor<64xf32>) -> tensor<64xf32>
  %b = "test.op"(%x) {lancet.time_us = 4.0 : f64} : (tensor<64xf32>) -> tensor<64xf32>
  func.return %u, %b : tensor<64xf32>, tensor<64xf32>
}
// CHECK-LABEL: func.func @serial
// CHECK-SAME:    lancet.makespan_us = 1.400000e+01 : f64, lancet.exposed_comm_us = 5.000000e+00 : f64
// CHECK-NEXT:    %a = "test.op"(%x) {{.*}}lancet.start_us = 0.000000e+00 : f64, lancet.end_us = 3.000000e+00 : f64, lancet.stream = 0 : i64}
// CHECK-NEXT:    %r = comm.allreduce %a {{.*}}lancet.start_us = 3.000000e+00 : f64, lancet.end_us = 8.000000e+00 : f64, lancet.stream = 1 : i64}
// CHECK-NEXT:    %u = "test.op"(%r) {{.*}}lancet.start_us = 8.000000e+00 : f64, lancet.end_us = 1.000000e+01 : f64, lancet.stream = 0 : i64}
// CHECK-NEXT:    %b = "test.op"(%x) {{.*}}lancet.start_us = 1.000000e+01 : f64, lancet.end_us = 1.400000e+01 : f64, lancet.stream = 0 : i64}
// CHECK-NEXT:    func.return

// -----

// The same ops in the order a, b, r, u: b [3,7] runs while r [3,8] communicates;
// u [8,10]. Exposed comm: [7,8] = 1.
// With overlap slowdown 1.5, b is slowed over [3,8]: progress 5/1.5 = 10/3, the last 2/3
// at full speed: b ends at 8 + 2/3 = 8.6666..., so u runs [8.6666..., 10.6666...]; exposed 0.
func.func @overlapped(%x: tensor<64xf32>) -> (tensor<64xf32>, tensor<64xf32>) {
  %a = "test.op"(%x) {lancet.time_us = 3.0 : f64} : (tensor<64xf32>) -> tensor<64xf32>
  %b = "test.op"(%x) {lancet.time_us = 4.0 : f64} : (tensor<64xf32>) -> tensor<64xf32>
  %r = comm.allreduce %a {lancet.time_us = 5.0 : f64} : (tensor<64xf32>) -> tensor<64xf32>
  %u = "test.op"(%r) {lancet.time_us = 2.0 : f64} : (tensor<64xf32>) -> tensor<64xf32>
  func.return %u, %b : tensor<64xf32>, tensor<64xf32>
}
// CHECK-LABEL: func.func @overlapped
// CHECK-SAME:    lancet.makespan_us = 1.000000e+01 : f64, lancet.exposed_comm_us = 1.000000e+00 : f64
// CHECK-NEXT:    %a = {{.*}}lancet.start_us = 0.000000e+00 : f64, lancet.end_us = 3.000000e+00 : f64, lancet.stream = 0 : i64}
// CHECK-NEXT:    %b = {{.*}}lancet.start_us = 3.000000e+00 : f64, lancet.end_us = 7.000000e+00 : f64, lancet.stream = 0 : i64}
// CHECK-NEXT:    %r = {{.*}}lancet.start_us = 3.000000e+00 : f64, lancet.end_us = 8.000000e+00 : f64, lancet.stream = 1 : i64}
// CHECK-NEXT:    %u = {{.*}}lancet.start_us = 8.000000e+00 : f64, lancet.end_us = 1.000000e+01 : f64, lancet.stream = 0 : i64}

// SLOW-LABEL: func.func @overlapped
// SLOW-SAME:    lancet.makespan_us = {{10\.66666666666666[0-9]*}} : f64, lancet.exposed_comm_us = 0.000000e+00 : f64
// SLOW-NEXT:    %a = {{.*}}lancet.start_us = 0.000000e+00 : f64, lancet.end_us = 3.000000e+00 : f64
// SLOW-NEXT:    %b = {{.*}}lancet.start_us = 3.000000e+00 : f64, lancet.end_us = {{8\.66666666666666[0-9]*}} : f64
// SLOW-NEXT:    %r = {{.*}}lancet.start_us = 3.000000e+00 : f64, lancet.end_us = 8.000000e+00 : f64
// SLOW-NEXT:    %u = {{.*}}lancet.start_us = {{8\.66666666666666[0-9]*}} : f64, lancet.end_us = {{10\.66666666666666[0-9]*}} : f64

// -----

// Two gradients reduced separately: a(1) -> r1(4), r2(4) -> u(1).
// One comm stream: r1 [1,5], r2 [5,9], u [9,10]. Two: r1 and r2 both [1,5], u [5,6].
func.func @two_streams(%x: tensor<64xf32>) -> tensor<64xf32> {
  %a = "test.op"(%x) {lancet.time_us = 1.0 : f64} : (tensor<64xf32>) -> tensor<64xf32>
  %r1 = comm.allreduce %a {lancet.time_us = 4.0 : f64} : (tensor<64xf32>) -> tensor<64xf32>
  %r2 = comm.allreduce %a {lancet.time_us = 4.0 : f64} : (tensor<64xf32>) -> tensor<64xf32>
  %u = "test.op"(%r1, %r2) {lancet.time_us = 1.0 : f64} : (tensor<64xf32>, tensor<64xf32>) -> tensor<64xf32>
  func.return %u : tensor<64xf32>
}
// CHECK-LABEL: func.func @two_streams
// CHECK-SAME:    lancet.makespan_us = 1.000000e+01 : f64, lancet.exposed_comm_us = 8.000000e+00 : f64
// CHECK:         %r2 = {{.*}}lancet.start_us = 5.000000e+00 : f64, lancet.end_us = 9.000000e+00 : f64, lancet.stream = 1 : i64}
// CHECK-NEXT:    %u = {{.*}}lancet.start_us = 9.000000e+00 : f64

// TWO-LABEL: func.func @two_streams
// TWO-SAME:    lancet.makespan_us = 6.000000e+00 : f64, lancet.exposed_comm_us = 4.000000e+00 : f64
// TWO:         %r1 = {{.*}}lancet.start_us = 1.000000e+00 : f64, lancet.end_us = 5.000000e+00 : f64, lancet.stream = 1 : i64}
// TWO-NEXT:    %r2 = {{.*}}lancet.start_us = 1.000000e+00 : f64, lancet.end_us = 5.000000e+00 : f64, lancet.stream = 2 : i64}
// TWO-NEXT:    %u = {{.*}}lancet.start_us = 5.000000e+00 : f64, lancet.end_us = 6.000000e+00 : f64, lancet.stream = 0 : i64}
