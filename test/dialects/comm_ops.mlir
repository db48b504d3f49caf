// RUN: LANCET_ROUNDTRIP
// RUN: LANCET_GENERIC_ROUNDTRIP
// RUN: lancet-opt %s | lancet-opt | filecheck %s

func.func @collectives(%x: tensor<8x4xf32>, %y: tensor<4xf32>, %c: tensor<2xi64>) -> tensor<8x4xf32> {
  %r = "comm.allreduce"(%x) : (tensor<8x4xf32>) -> tensor<8x4xf32>
  %a, %b = comm.allreduce %x, %y reduce max group <[[0, 1], [2, 3]]> : (tensor<8x4xf32>, tensor<4xf32>) -> (tensor<8x4xf32>, tensor<4xf32>)
  %g = comm.allgather %x axis 1 group <[[0, 1]]> : (tensor<8x4xf32>) -> tensor<8x8xf32>
  %s = comm.reduce_scatter %x reduce avg group <[[0, 1, 2, 3]]> : (tensor<8x4xf32>) -> tensor<2x4xf32>
  %t = comm.all_to_all %x split 0 concat 1 group <[[0, 1]]> : (tensor<8x4xf32>) -> tensor<4x8xf32>
  %e = comm.all_to_all %x group <[[0, 1]]> : (tensor<8x4xf32>) -> tensor<8x4xf32>
  %d = "test.op"() : () -> tensor<2x4x8xf32>
  %v, %vc = comm.all_to_allv %d, %c group <[[0, 1]]> : (tensor<2x4x8xf32>, tensor<2xi64>) -> (tensor<2x4x8xf32>, tensor<2xi64>)
  func.return %r : tensor<8x4xf32>
}

// CHECK-LABEL: func.func @collectives
// CHECK-NEXT:    %r = comm.allreduce %x : (tensor<8x4xf32>) -> tensor<8x4xf32>
// CHECK-NEXT:    %a, %b = comm.allreduce %x, %y reduce max group <{{\[\[}}0, 1], [2, 3]]> : (tensor<8x4xf32>, tensor<4xf32>) -> (tensor<8x4xf32>, tensor<4xf32>)
// CHECK-NEXT:    %g = comm.allgather %x axis 1 group <{{\[\[}}0, 1]]> : (tensor<8x4xf32>) -> tensor<8x8xf32>
// CHECK-NEXT:    %s = comm.reduce_scatter %x reduce avg group <{{\[\[}}0, 1, 2, 3]]> : (tensor<8x4xf32>) -> tensor<2x4xf32>
// CHECK-NEXT:    %t = comm.all_to_all %x concat 1 group <{{\[\[}}0, 1]]> : (tensor<8x4xf32>) -> tensor<4x8xf32>
// CHECK-NEXT:    %e = comm.all_to_all %x group <{{\[\[}}0, 1]]> : (tensor<8x4xf32>) -> tensor<8x4xf32>
// CHECK-NEXT:    %d = "test.op"() : () -> tensor<2x4x8xf32>
// CHECK-NEXT:    %v, %vc = comm.all_to_allv %d, %c group <{{\[\[}}0, 1]]> : (tensor<2x4x8xf32>, tensor<2xi64>) -> (tensor<2x4x8xf32>, tensor<2xi64>)
// CHECK-NEXT:    func.return %r : tensor<8x4xf32>

// GENERIC:      %r = "comm.allreduce"(%x) <{reduction = #comm<reduction sum>}> : (tensor<8x4xf32>) -> tensor<8x4xf32>
// GENERIC-NEXT: "comm.allreduce"(%x, %y)
// GENERIC-SAME:   reduction = #comm<reduction max>
// GENERIC-SAME:   groups = #comm.groups<{{\[\[}}0, 1], [2, 3]]>
// GENERIC:      "comm.allgather"(%x) <{axis = 1 : i64, groups = #comm.groups<{{\[\[}}0, 1]]>}>
// GENERIC:      "comm.all_to_all"(%x)
// GENERIC-SAME:   concat_axis = 1 : i64

// -----

// The world size of the module gives collectives without a group their size.
builtin.module attributes {lancet.world_size = 4 : i64} {
  func.func @world(%x: tensor<8xf32>) -> tensor<32xf32> {
    %g = comm.allgather %x : (tensor<8xf32>) -> tensor<32xf32>
    func.return %g : tensor<32xf32>
  }
}
// CHECK-LABEL: func.func @world
// CHECK-NEXT:    %g = comm.allgather %x : (tensor<8xf32>) -> tensor<32xf32>
