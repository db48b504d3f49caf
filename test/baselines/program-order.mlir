// RUN: lancet-opt %s -p program-order | filecheck %s
// RUN: lancet-opt %s -p program-order,program-order | filecheck %s

// The identity schedule: the block keeps its order, even where FIFO would move the
// all-reduce's consumer (%u) after the independent %c.
func.func @keep(%x: tensor<8xf32>) -> (tensor<8xf32>, tensor<8xf32>) {
  %g = "test.op"(%x) : (tensor<8xf32>) -> tensor<8xf32>
  %r = comm.allreduce %g : (tensor<8xf32>) -> tensor<8xf32>
  %u = "test.op"(%r) : (tensor<8xf32>) -> tensor<8xf32>
  %c = "test.op"(%x) : (tensor<8xf32>) -> tensor<8xf32>
  func.return %u, %c : tensor<8xf32>, tensor<8xf32>
}
// CHECK-LABEL: func.func @keep
// CHECK-NEXT:    %g = "test.op"(%x)
// CHECK-NEXT:    %r = comm.allreduce %g
// CHECK-NEXT:    %u = "test.op"(%r)
// CHECK-NEXT:    %c = "test.op"(%x)
// CHECK-NEXT:    func.return %u, %c

