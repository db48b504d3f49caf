// RUN: lancet-opt %s -p 'ddp-bucket-schedule{bucket-bytes=512}' --split-input-file | filecheck %s
// RUN: lancet-opt %s -p ddp-bucket-schedule --split-input-file | filecheck %s --check-prefix=BIG

// A backward pass without role annotations: every allreduce is a gradient all-reduce.
// Gradients become ready in the order g1 (256 B), g2 (256 B), g3 (256 B), g4 (128 B); the
// program issues all-reduces late and in reverse. 512-byte buckets: {g1, g2} launched right
// after g2's producer, {g3, g4} (384 B, closed at the end) right after g4's producer.
// The default 25 MiB bucket holds all four, launched after the last gradient.
func.func @backward(%x: tensor<64xf32>) -> (tensor<64xf32>, tensor<64xf32>, tensor<64xf32>, tensor<32xf32>) {
  %g1 = "test.op"(%x) : (tensor<64xf32>) -> tensor<64xf32>
  %d1 = "test.op"(%g1) : (tensor<64xf32>) -> tensor<64xf32>
  %g2 = "test.op"(%d1) : (tensor<64xf32>) -> tensor<64xf32>
  %d2 = "test.op"(%g2) : (tensor<64xf32>) -> tensor<64xf32>
  %g3 = "test.op"(%d2) : (tensor<64xf32>) -> tensor<64xf32>
  %d3 = "test.op"(%g3) : (tensor<64xf32>) -> tensor<64xf32>
  %g4 = "test.op"(%d3) : (tensor<64xf32>) -> tensor<32xf32>
  %r4 = comm.allreduce %g4 : (tensor<32xf32>) -> tensor<32xf32>
  %r3 = comm.allreduce %g3 : (tensor<64xf32>) -> tensor<64xf32>
  %r2 = comm.allreduce %g2 : (tensor<64xf32>) -> tensor<64xf32>
  %r1 = comm.allreduce %g1 : (tensor<64xf32>) -> tensor<64xf32>
  %u1 = "test.op"(%r1) : (tensor<64xf32>) -> tensor<64xf32>
  %u2 = "test.op"(%r2) : (tensor<64xf32>) -> tensor<64xf32>
  %u3 = "test.op"(%r3) : (tensor<64xf32>) -> tensor<64xf32>
  %u4 = "test.op"(%r4) : (tensor<32xf32>) -> tensor<32xf32>
  func.return %u1, %u2, %u3, %u4 : tensor<64xf32>, tensor<64xf32>, tensor<64xf32>, tensor<32xf32>
}
// CHECK-LABEL: func.func @backward
// CHECK-NEXT:    %g1 = "test.op"(%x)
// CHECK-NEXT:    %d1 = "test.op"(%g1)
// CHECK-NEXT:    %g2 = "test.op"(%d1)
// CHECK-NEXT:    %[[A1:.*]], %[[A2:.*]] = comm.allreduce %g1, %g2 : (tensor<64xf32>, tensor<64xf32>) -> (tensor<64xf32>, tensor<64xf32>)
// CHECK-NEXT:    %d2 = "test.op"(%g2)
// CHECK-NEXT:    %g3 = "test.op"(%d2)
// CHECK-NEXT:    %d3 = "test.op"(%g3)
// CHECK-NEXT:    %g4 = "test.op"(%d3)
// CHECK-NEXT:    %[[B3:.*]], %[[B4:.*]] = comm.allreduce %g3, %g4 : (tensor<64xf32>, tensor<32xf32>) -> (tensor<64xf32>, tensor<32xf32>)
// CHECK-NEXT:    %u1 = "test.op"(%[[A1]])
// CHECK-NEXT:    %u2 = "test.op"(%[[A2]])
// CHECK-NEXT:    %u3 = "test.op"(%[[B3]])
// CHECK-NEXT:    %u4 = "test.op"(%[[B4]])
// CHECK-NEXT:    func.return

// BIG-LABEL: func.func @backward
// BIG:         %g4 = "test.op"(%d3)
// BIG-NEXT:    %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} = comm.allreduce %g1, %g2, %g3, %g4 : (tensor<64xf32>, tensor<64xf32>, tensor<64xf32>, tensor<32xf32>)
// BIG-NOT:     comm.allreduce
// BIG:         func.return

// -----

// With role annotations only all-reduces of dW values are gradients: the all-reduce of an
// activation (%act, role dx) stays where it is and is never bucketed. The two gradients fit
// one 512-byte bucket (256 + 128 B, closed at the end), placed after the last producer.
func.func @roles(%x: tensor<64xf32>) -> (tensor<64xf32>, tensor<64xf32>, tensor<32xf32>) {
  %act = "test.op"(%x) {lancet.role = "dx"} : (tensor<64xf32>) -> tensor<64xf32>
  %sum = comm.allreduce %act {lancet.role = "dx"} : (tensor<64xf32>) -> tensor<64xf32>
  %gw = "test.op"(%x) {lancet.role = "dw"} : (tensor<64xf32>) -> tensor<64xf32>
  %d = "test.op"(%sum) {lancet.role = "dx"} : (tensor<64xf32>) -> tensor<64xf32>
  %gb = "test.op"(%d) {lancet.role = "dw"} : (tensor<64xf32>) -> tensor<32xf32>
  %rb = comm.allreduce %gb reduce avg {lancet.role = "dw"} : (tensor<32xf32>) -> tensor<32xf32>
  %rw = comm.allreduce %gw reduce avg {lancet.role = "dw"} : (tensor<64xf32>) -> tensor<64xf32>
  func.return %d, %rw, %rb : tensor<64xf32>, tensor<64xf32>, tensor<32xf32>
}
// CHECK-LABEL: func.func @roles
// CHECK-NEXT:    %act = "test.op"(%x)
// CHECK-NEXT:    %sum = comm.allreduce %act {lancet.role = "dx"}
// CHECK-NEXT:    %gw = "test.op"(%x)
// CHECK-NEXT:    %d = "test.op"(%sum)
// CHECK-NEXT:    %gb = "test.op"(%d)
// CHECK-NEXT:    %[[W:.*]], %[[B:.*]] = comm.allreduce %gw, %gb reduce avg {lancet.role = "dw"} : (tensor<64xf32>, tensor<32xf32>) -> (tensor<64xf32>, tensor<32xf32>)
// CHECK-NEXT:    func.return %d, %[[W]], %[[B]]
