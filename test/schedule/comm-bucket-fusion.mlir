// RUN: lancet-opt %s -p 'comm-bucket-fusion{bucket-bytes=512}' --split-input-file | filecheck %s
// RUN: lancet-opt %s -p 'comm-bucket-fusion{bucket-bytes=0}' --split-input-file | filecheck %s --check-prefix=OFF
// RUN: lancet-opt %s -p 'comm-bucket-fusion{bucket-bytes=100000}' --split-input-file | filecheck %s --check-prefix=BIG

// Five independent 256-byte gradients. 512-byte buckets: {g1,g2} {g3,g4}, and g5 alone
// (a bucket of one is left as it is). One huge bucket: all five in one op.
func.func @grads(%x: tensor<64xf32>) -> (tensor<64xf32>, tensor<64xf32>, tensor<64xf32>, tensor<64xf32>, tensor<64xf32>) {
  %g1 = "test.op"(%x) : (tensor<64xf32>) -> tensor<64xf32>
  %r1 = comm.allreduce %g1 : (tensor<64xf32>) -> tensor<64xf32>
  %g2 = "test.op"(%x) : (tensor<64xf32>) -> tensor<64xf32>
  %r2 = comm.allreduce %g2 : (tensor<64xf32>) -> tensor<64xf32>
  %g3 = "test.op"(%x) : (tensor<64xf32>) -> tensor<64xf32>
  %r3 = comm.allreduce %g3 : (tensor<64xf32>) -> tensor<64xf32>
  %g4 = "test.op"(%x) : (tensor<64xf32>) -> tensor<64xf32>
  %r4 = comm.allreduce %g4 : (tensor<64xf32>) -> tensor<64xf32>
  %g5 = "test.op"(%x) : (tensor<64xf32>) -> tensor<64xf32>
  %r5 = comm.allreduce %g5 : (tensor<64xf32>) -> tensor<64xf32>
  %u1 = "test.op"(%r1) : (tensor<64xf32>) -> tensor<64xf32>
  %u2 = "test.op"(%r2) : (tensor<64xf32>) -> tensor<64xf32>
  %u3 = "test.op"(%r3) : (tensor<64xf32>) -> tensor<64xf32>
  %u4 = "test.op"(%r4) : (tensor<64xf32>) -> tensor<64xf32>
  %u5 = "test.op"(%r5) : (tensor<64xf32>) -> tensor<64xf32>
  func.return %u1, %u2, %u3, %u4, %u5 : tensor<64xf32>, tensor<64xf32>, tensor<64xf32>, tensor<64xf32>, tensor<64xf32>
}
// CHECK-LABEL: func.func @grads
// CHECK-NOT:     comm.allreduce
// CHECK:         %g2 = "test.op"(%x)
// CHECK-NEXT:    %[[A1:.*]], %[[A2:.*]] = comm.allreduce %g1, %g2 : (tensor<64xf32>, tensor<64xf32>) -> (tensor<64xf32>, tensor<64xf32>)
// CHECK:         %g4 = "test.op"(%x)
// CHECK-NEXT:    %[[B3:.*]], %[[B4:.*]] = comm.allreduce %g3, %g4 : (tensor<64xf32>, tensor<64xf32>) -> (tensor<64xf32>, tensor<64xf32>)
// CHECK:         %r5 = comm.allreduce %g5 : (tensor<64xf32>) -> tensor<64xf32>
// CHECK-NEXT:    %u1 = "test.op"(%[[A1]])
// CHECK-NEXT:    %u2 = "test.op"(%[[A2]])
// CHECK-NEXT:    %u3 = "test.op"(%[[B3]])
// CHECK-NEXT:    %u4 = "test.op"(%[[B4]])
// CHECK-NEXT:    %u5 = "test.op"(%r5)
// CHECK-NOT:     comm.allreduce
// CHECK:         func.return

// OFF-LABEL: func.func @grads
// OFF-COUNT-5: comm.allreduce %g
// BIG-LABEL: func.func @grads
// BIG:         comm.allreduce %g1, %g2, %g3, %g4, %g5 :
// BIG-NOT:     comm.allreduce

// -----

// A collective that depends on a bucket member closes the bucket (Lancet would build a
// cycle here); different reductions and element types never share a bucket.
func.func @rules(%x: tensor<64xf32>, %h: tensor<64xf16>) -> (tensor<64xf32>, tensor<64xf32>, tensor<64xf32>, tensor<64xf16>) {
  %g1 = "test.op"(%x) : (tensor<64xf32>) -> tensor<64xf32>
  %r1 = comm.allreduce %g1 : (tensor<64xf32>) -> tensor<64xf32>
  %d = "test.op"(%r1) : (tensor<64xf32>) -> tensor<64xf32>
  %r2 = comm.allreduce %d : (tensor<64xf32>) -> tensor<64xf32>
  %m = comm.allreduce %x reduce max : (tensor<64xf32>) -> tensor<64xf32>
  %hr = comm.allreduce %h : (tensor<64xf16>) -> tensor<64xf16>
  func.return %r1, %r2, %m, %hr : tensor<64xf32>, tensor<64xf32>, tensor<64xf32>, tensor<64xf16>
}
// BIG-LABEL: func.func @rules
// BIG-DAG:     %r1 = comm.allreduce %g1 : (tensor<64xf32>) -> tensor<64xf32>
// BIG-DAG:     %m = comm.allreduce %x reduce max : (tensor<64xf32>) -> tensor<64xf32>
// BIG-DAG:     %hr = comm.allreduce %h : (tensor<64xf16>) -> tensor<64xf16>
// BIG-DAG:     %r2 = comm.allreduce %d : (tensor<64xf32>) -> tensor<64xf32>

// -----

// Gathers are bucketed only when asked for.
// RUN: lancet-opt %s -p 'comm-bucket-fusion{bucket-bytes=100000 kinds=allgather,allreduce}' --split-input-file | filecheck %s --check-prefix=GATHER
func.func @gathers(%x: tensor<16xf32>, %y: tensor<16xf32>) -> (tensor<64xf32>, tensor<64xf32>) {
  %a = comm.allgather %x group <[[0, 1, 2, 3]]> : (tensor<16xf32>) -> tensor<64xf32>
  %b = comm.allgather %y group <[[0, 1, 2, 3]]> : (tensor<16xf32>) -> tensor<64xf32>
  func.return %a, %b : tensor<64xf32>, tensor<64xf32>
}
// BIG-LABEL: func.func @gathers
// BIG-NEXT:    %a = comm.allgather %x
// BIG-NEXT:    %b = comm.allgather %y
// GATHER-LABEL: func.func @gathers
// GATHER-NEXT:    %{{.*}}, %{{.*}} = comm.allgather %x, %y group <{{\[\[}}0, 1, 2, 3]]> : (tensor<16xf32>, tensor<16xf32>) -> (tensor<64xf32>, tensor<64xf32>)

// -----

// The fused op keeps the annotations all its members share (lancet.role), not per-op timings
// (a simulation's lancet.start_us / lancet.stream).
func.func @annotations(%x: tensor<16xf32>, %y: tensor<16xf32>) -> (tensor<16xf32>, tensor<16xf32>) {
  %a = comm.allreduce %x {lancet.role = "dw", lancet.start_us = 3.0 : f64, lancet.stream = 1 : i64, tag = 1 : i64} : (tensor<16xf32>) -> tensor<16xf32>
  %b = comm.allreduce %y {lancet.role = "dw", lancet.start_us = 4.0 : f64, lancet.stream = 1 : i64, tag = 2 : i64} : (tensor<16xf32>) -> tensor<16xf32>
  func.return %a, %b : tensor<16xf32>, tensor<16xf32>
}
// BIG-LABEL: func.func @annotations
// BIG-NEXT:    %a, %b = comm.allreduce %x, %y {lancet.role = "dw"} : (tensor<16xf32>, tensor<16xf32>) -> (tensor<16xf32>, tensor<16xf32>)

// -----

// A collective with a measured time (lancet.time_us, as every imported NCCL kernel has: it
// includes waiting for the peers) is never bucketed: the fused op's time could not be derived
// from the measurements. %a and %c (no time) fuse around it; %b stays alone.
func.func @measured(%x: tensor<16xf32>, %y: tensor<16xf32>, %z: tensor<16xf32>) -> (tensor<16xf32>, tensor<16xf32>, tensor<16xf32>) {
  %a = comm.allreduce %x : (tensor<16xf32>) -> tensor<16xf32>
  %b = comm.allreduce %y {lancet.time_us = 4.0 : f64} : (tensor<16xf32>) -> tensor<16xf32>
  %c = comm.allreduce %z : (tensor<16xf32>) -> tensor<16xf32>
  func.return %a, %b, %c : tensor<16xf32>, tensor<16xf32>, tensor<16xf32>
}
// BIG-LABEL: func.func @measured
// BIG-NEXT:    %b = comm.allreduce %y {lancet.time_us = 4.000000e+00 : f64} : (tensor<16xf32>) -> tensor<16xf32>
// BIG-NEXT:    %a, %c = comm.allreduce %x, %z : (tensor<16xf32>, tensor<16xf32>) -> (tensor<16xf32>, tensor<16xf32>)
// BIG-NEXT:    func.return %a, %b, %c
