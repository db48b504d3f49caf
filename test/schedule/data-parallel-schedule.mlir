// RUN: lancet-opt %s --data-parallel-schedule --split-input-file | filecheck %s
// RUN: lancet-opt %s -p data-parallel-schedule --split-input-file | filecheck %s
// RUN: xdsl-opt %s -p data-parallel-schedule --split-input-file | filecheck %s

// Lancet's six FIFO scheduling shapes (lancet-algorithms.md §11), each written in a
// depth-first program order; the expected orders are derived by hand from §2.

// 1. Two branches with an allreduce each: both collectives launch before either consumer.
func.func @two_branch(%x: tensor<64xf32>) -> tensor<64xf32> {
  %m = "test.op"(%x) {k = "mul"} : (tensor<64xf32>) -> tensor<64xf32>
  %a1 = "test.op"(%m) {k = "atan"} : (tensor<64xf32>) -> tensor<64xf32>
  %r1 = comm.allreduce %a1 : (tensor<64xf32>) -> tensor<64xf32>
  %m1 = "test.op"(%r1) {k = "mul"} : (tensor<64xf32>) -> tensor<64xf32>
  %a2 = "test.op"(%m) {k = "atan"} : (tensor<64xf32>) -> tensor<64xf32>
  %r2 = comm.allreduce %a2 : (tensor<64xf32>) -> tensor<64xf32>
  %m2 = "test.op"(%r2) {k = "mul"} : (tensor<64xf32>) -> tensor<64xf32>
  %c = "test.op"(%m1, %m2) {k = "concat"} : (tensor<64xf32>, tensor<64xf32>) -> tensor<64xf32>
  func.return %c : tensor<64xf32>
}
// CHECK-LABEL: func.func @two_branch
// CHECK-NEXT:    %m = "test.op"(%x)
// CHECK-NEXT:    %a1 = "test.op"(%m)
// CHECK-NEXT:    %a2 = "test.op"(%m)
// CHECK-NEXT:    %r1 = comm.allreduce %a1
// CHECK-NEXT:    %r2 = comm.allreduce %a2
// CHECK-NEXT:    %m1 = "test.op"(%r1)
// CHECK-NEXT:    %m2 = "test.op"(%r2)
// CHECK-NEXT:    %c = "test.op"(%m1, %m2)
// CHECK-NEXT:    func.return %c

// -----

// 2. Unbalanced branches: the short branch's allreduce is interleaved with the long
//    branch's atans; both consumers come last.
func.func @unbalanced(%x: tensor<64xf32>) -> tensor<64xf32> {
  %l1 = "test.op"(%x) {k = "atan"} : (tensor<64xf32>) -> tensor<64xf32>
  %l2 = "test.op"(%l1) {k = "atan"} : (tensor<64xf32>) -> tensor<64xf32>
  %l3 = "test.op"(%l2) {k = "atan"} : (tensor<64xf32>) -> tensor<64xf32>
  %l4 = "test.op"(%l3) {k = "atan"} : (tensor<64xf32>) -> tensor<64xf32>
  %rl = comm.allreduce %l4 : (tensor<64xf32>) -> tensor<64xf32>
  %ml = "test.op"(%rl) {k = "mul"} : (tensor<64xf32>) -> tensor<64xf32>
  %s1 = "test.op"(%x) {k = "atan"} : (tensor<64xf32>) -> tensor<64xf32>
  %rs = comm.allreduce %s1 : (tensor<64xf32>) -> tensor<64xf32>
  %ms = "test.op"(%rs) {k = "mul"} : (tensor<64xf32>) -> tensor<64xf32>
  %c = "test.op"(%ml, %ms) {k = "concat"} : (tensor<64xf32>, tensor<64xf32>) -> tensor<64xf32>
  func.return %c : tensor<64xf32>
}
// CHECK-LABEL: func.func @unbalanced
// CHECK-NEXT:    %l1 = "test.op"(%x)
// CHECK-NEXT:    %s1 = "test.op"(%x)
// CHECK-NEXT:    %l2 = "test.op"(%l1)
// CHECK-NEXT:    %rs = comm.allreduce %s1
// CHECK-NEXT:    %l3 = "test.op"(%l2)
// CHECK-NEXT:    %l4 = "test.op"(%l3)
// CHECK-NEXT:    %rl = comm.allreduce %l4
// CHECK-NEXT:    %ms = "test.op"(%rs)
// CHECK-NEXT:    %ml = "test.op"(%rl)
// CHECK-NEXT:    %c = "test.op"(%ml, %ms)
// CHECK-NEXT:    func.return %c

// -----

// 3. The "example": the allreduce is issued early and the independent atan chain runs
//    before the allreduce's consumer.
func.func @example(%x: tensor<64xf32>) -> tensor<64xf32> {
  %a1 = "test.op"(%x) {k = "atan"} : (tensor<64xf32>) -> tensor<64xf32>
  %r = comm.allreduce %a1 : (tensor<64xf32>) -> tensor<64xf32>
  %a2 = "test.op"(%r) {k = "atan"} : (tensor<64xf32>) -> tensor<64xf32>
  %b1 = "test.op"(%x) {k = "atan"} : (tensor<64xf32>) -> tensor<64xf32>
  %b2 = "test.op"(%b1) {k = "atan"} : (tensor<64xf32>) -> tensor<64xf32>
  %m = "test.op"(%a2, %b2) {k = "mul"} : (tensor<64xf32>, tensor<64xf32>) -> tensor<64xf32>
  func.return %m : tensor<64xf32>
}
// CHECK-LABEL: func.func @example
// CHECK-NEXT:    %a1 = "test.op"(%x)
// CHECK-NEXT:    %b1 = "test.op"(%x)
// CHECK-NEXT:    %r = comm.allreduce %a1
// CHECK-NEXT:    %b2 = "test.op"(%b1)
// CHECK-NEXT:    %a2 = "test.op"(%r)
// CHECK-NEXT:    %m = "test.op"(%a2, %b2)
// CHECK-NEXT:    func.return %m

// -----

// 4. Delayed successor: all five atans of the non-comm branch precede the relus that
//    consume the allreduce.
func.func @delayed_successor(%x: tensor<64xf32>) -> tensor<64xf32> {
  %a = "test.op"(%x) {k = "atan"} : (tensor<64xf32>) -> tensor<64xf32>
  %r = comm.allreduce %a : (tensor<64xf32>) -> tensor<64xf32>
  %u1 = "test.op"(%r) {k = "relu"} : (tensor<64xf32>) -> tensor<64xf32>
  %u2 = "test.op"(%u1) {k = "relu"} : (tensor<64xf32>) -> tensor<64xf32>
  %b1 = "test.op"(%x) {k = "atan"} : (tensor<64xf32>) -> tensor<64xf32>
  %b2 = "test.op"(%b1) {k = "atan"} : (tensor<64xf32>) -> tensor<64xf32>
  %b3 = "test.op"(%b2) {k = "atan"} : (tensor<64xf32>) -> tensor<64xf32>
  %b4 = "test.op"(%b3) {k = "atan"} : (tensor<64xf32>) -> tensor<64xf32>
  %b5 = "test.op"(%b4) {k = "atan"} : (tensor<64xf32>) -> tensor<64xf32>
  %s = "test.op"(%u2, %b5) {k = "add"} : (tensor<64xf32>, tensor<64xf32>) -> tensor<64xf32>
  func.return %s : tensor<64xf32>
}
// CHECK-LABEL: func.func @delayed_successor
// CHECK-NEXT:    %a = "test.op"(%x)
// CHECK-NEXT:    %b1 = "test.op"(%x)
// CHECK-NEXT:    %r = comm.allreduce %a
// CHECK-NEXT:    %b2 = "test.op"(%b1)
// CHECK-NEXT:    %b3 = "test.op"(%b2)
// CHECK-NEXT:    %b4 = "test.op"(%b3)
// CHECK-NEXT:    %b5 = "test.op"(%b4)
// CHECK-NEXT:    %u1 = "test.op"(%r)
// CHECK-NEXT:    %u2 = "test.op"(%u1)
// CHECK-NEXT:    %s = "test.op"(%u2, %b5)
// CHECK-NEXT:    func.return %s

// -----

// 5. Nested branches without communication: plain breadth-first order.
func.func @nested_branch(%x: tensor<64xf32>) -> tensor<64xf32> {
  %a = "test.op"(%x) : (tensor<64xf32>) -> tensor<64xf32>
  %b = "test.op"(%a) : (tensor<64xf32>) -> tensor<64xf32>
  %d = "test.op"(%b) : (tensor<64xf32>) -> tensor<64xf32>
  %e = "test.op"(%b) : (tensor<64xf32>) -> tensor<64xf32>
  %c = "test.op"(%a) : (tensor<64xf32>) -> tensor<64xf32>
  %f = "test.op"(%c) : (tensor<64xf32>) -> tensor<64xf32>
  %g = "test.op"(%d, %e, %f) : (tensor<64xf32>, tensor<64xf32>, tensor<64xf32>) -> tensor<64xf32>
  func.return %g : tensor<64xf32>
}
// CHECK-LABEL: func.func @nested_branch
// CHECK-NEXT:    %a = "test.op"(%x)
// CHECK-NEXT:    %b = "test.op"(%a)
// CHECK-NEXT:    %c = "test.op"(%a)
// CHECK-NEXT:    %d = "test.op"(%b)
// CHECK-NEXT:    %e = "test.op"(%b)
// CHECK-NEXT:    %f = "test.op"(%c)
// CHECK-NEXT:    %g = "test.op"(%d, %e, %f)
// CHECK-NEXT:    func.return %g

// -----

// 6. Cascading collectives: the pattern twice in a row; in each stage the relu that
//    consumes the allreduce comes after the atan chain.
func.func @cascading(%x: tensor<64xf32>) -> tensor<64xf32> {
  %a = "test.op"(%x) {k = "atan"} : (tensor<64xf32>) -> tensor<64xf32>
  %r = comm.allreduce %a : (tensor<64xf32>) -> tensor<64xf32>
  %u = "test.op"(%r) {k = "relu"} : (tensor<64xf32>) -> tensor<64xf32>
  %b1 = "test.op"(%x) {k = "atan"} : (tensor<64xf32>) -> tensor<64xf32>
  %b2 = "test.op"(%b1) {k = "atan"} : (tensor<64xf32>) -> tensor<64xf32>
  %j = "test.op"(%u, %b2) {k = "add"} : (tensor<64xf32>, tensor<64xf32>) -> tensor<64xf32>
  %a_ = "test.op"(%j) {k = "atan"} : (tensor<64xf32>) -> tensor<64xf32>
  %r_ = comm.allreduce %a_ : (tensor<64xf32>) -> tensor<64xf32>
  %u_ = "test.op"(%r_) {k = "relu"} : (tensor<64xf32>) -> tensor<64xf32>
  %c1 = "test.op"(%j) {k = "atan"} : (tensor<64xf32>) -> tensor<64xf32>
  %c2 = "test.op"(%c1) {k = "atan"} : (tensor<64xf32>) -> tensor<64xf32>
  %j_ = "test.op"(%u_, %c2) {k = "add"} : (tensor<64xf32>, tensor<64xf32>) -> tensor<64xf32>
  func.return %j_ : tensor<64xf32>
}
// CHECK-LABEL: func.func @cascading
// CHECK-NEXT:    %a = "test.op"(%x)
// CHECK-NEXT:    %b1 = "test.op"(%x)
// CHECK-NEXT:    %r = comm.allreduce %a
// CHECK-NEXT:    %b2 = "test.op"(%b1)
// CHECK-NEXT:    %u = "test.op"(%r)
// CHECK-NEXT:    %j = "test.op"(%u, %b2)
// CHECK-NEXT:    %a_ = "test.op"(%j)
// CHECK-NEXT:    %c1 = "test.op"(%j)
// CHECK-NEXT:    %r_ = comm.allreduce %a_
// CHECK-NEXT:    %c2 = "test.op"(%c1)
// CHECK-NEXT:    %u_ = "test.op"(%r_)
// CHECK-NEXT:    %j_ = "test.op"(%u_, %c2)
// CHECK-NEXT:    func.return %j_

// -----

// An op with a region moves as a whole; a use inside its region counts as its own use
// (so it is a consumer of the allreduce and waits like one).
func.func @nested_use(%x: tensor<64xf32>) -> tensor<64xf32> {
  %a = "test.op"(%x) {k = "atan"} : (tensor<64xf32>) -> tensor<64xf32>
  %r = comm.allreduce %a : (tensor<64xf32>) -> tensor<64xf32>
  %w = "test.op"() ({
    "test.termop"(%r) : (tensor<64xf32>) -> ()
  }) {k = "region"} : () -> tensor<64xf32>
  %b = "test.op"(%x) {k = "atan"} : (tensor<64xf32>) -> tensor<64xf32>
  %s = "test.op"(%w, %b) {k = "add"} : (tensor<64xf32>, tensor<64xf32>) -> tensor<64xf32>
  func.return %s : tensor<64xf32>
}
// CHECK-LABEL: func.func @nested_use
// CHECK-NEXT:    %a = "test.op"(%x)
// CHECK-NEXT:    %b = "test.op"(%x)
// CHECK-NEXT:    %r = comm.allreduce %a
// CHECK-NEXT:    %w = "test.op"() ({
// CHECK-NEXT:      "test.termop"(%r)
// CHECK-NEXT:    })
// CHECK-NEXT:    %s = "test.op"(%w, %b)
// CHECK-NEXT:    func.return %s
