// RUN: lancet-opt %s --verify-diagnostics --split-input-file

%x = "test.op"() : () -> tensor<8xf32>
%r = comm.allreduce %x : (tensor<8xf32>) -> tensor<4xf32>
// expected-error@-1 {{comm.allreduce: result #0 shape [4] must equal operand shape [8]}}

// -----

%x = "test.op"() : () -> tensor<8xf32>
%r:2 = "comm.allreduce"(%x) : (tensor<8xf32>) -> (tensor<8xf32>, tensor<8xf32>)
// expected-error@-1 {{comm.allreduce: expects as many results as operands, got 1 operands and 2 results}}

// -----

%x = "test.op"() : () -> tensor<8xf32>
%r = comm.allreduce %x : (tensor<8xf32>) -> tensor<8xf16>
// expected-error@-1 {{comm.allreduce: operand #0 has element type f32 but result #0 has f16}}

// -----

%x = "test.op"() : () -> tensor<8xf32>
%r = comm.allreduce %x reduce mean : (tensor<8xf32>) -> tensor<8xf32>
// expected-error@-1 {{Expected `sum`, `prod`, `max`, `min`, or `avg`}}

// -----

%x = "test.op"() : () -> tensor<8x4xf32>
%g = comm.allgather %x axis 2 : (tensor<8x4xf32>) -> tensor<8x8xf32>
// expected-error@-1 {{comm.allgather: axis 2 out of range for rank 2}}

// -----

%x = "test.op"() : () -> tensor<6xf32>
%s = comm.reduce_scatter %x group <[[0, 1, 2, 3]]> : (tensor<6xf32>) -> tensor<2xf32>
// expected-error@-1 {{comm.reduce_scatter: operand #0 dim 0 (6) is not divisible by the group size 4}}

// -----

%x = "test.op"() : () -> tensor<4xf32>
%g = comm.allgather %x group <[[0, 1, 2, 3]]> : (tensor<4xf32>) -> tensor<4xf32>
// expected-error@-1 {{comm.allgather: dim 0 of result #0 is 4, expected 16 (operand dim 4, group size 4)}}

// -----

%x = "test.op"() : () -> tensor<6x4xf32>
%t = comm.all_to_all %x group <[[0, 1, 2, 3]]> : (tensor<6x4xf32>) -> tensor<6x4xf32>
// expected-error@-1 {{comm.all_to_all: operand #0 dim 0 (6) is not divisible by the group size 4}}

// -----

%x = "test.op"() : () -> tensor<8x4xf32>
%t = comm.all_to_all %x split 0 concat 1 group <[[0, 1]]> : (tensor<8x4xf32>) -> tensor<8x4xf32>
// expected-error@-1 {{comm.all_to_all: result #0 shape [8, 4] does not match expected [4, 8]}}

// -----

%x = "test.op"() : () -> tensor<8xf32>
%r = comm.allreduce %x group <[[0, 1], [1, 2]]> : (tensor<8xf32>) -> tensor<8xf32>
// expected-error@-1 {{comm.groups: a rank appears in more than one group}}

// -----

%x = "test.op"() : () -> tensor<8xf32>
%r = comm.allreduce %x group <[[0, 1], [2]]> : (tensor<8xf32>) -> tensor<8xf32>
// expected-error@-1 {{comm.groups: all groups must have the same size}}

// -----

%x = "test.op"() : () -> tensor<4x2xf32>
%v = comm.all_to_allv %x : (tensor<4x2xf32>) -> tensor<4x2xf32>
// expected-error@-1 {{comm.all_to_allv: expects N data operands followed by N count operands}}

// -----

// Without a group size the all-to-all's shapes still have to agree with each other.
%x = "test.op"() : () -> tensor<8x4xf32>
%t = comm.all_to_all %x split 0 concat 1 : (tensor<8x4xf32>) -> tensor<3x5x7xf32>
// expected-error@-1 {{comm.all_to_all: result #0 rank 3 != operand rank 2}}

// -----

%x = "test.op"() : () -> tensor<8x4xf32>
%t = comm.all_to_all %x split 0 concat 1 : (tensor<8x4xf32>) -> tensor<4x12xf32>
// expected-error@-1 {{comm.all_to_all: result #0 shape [4, 12] does not match expected [4, 8]}}

// -----

%x = "test.op"() : () -> tensor<8x4xf32>
%t = comm.all_to_all %x split 0 concat 1 : (tensor<8x4xf32>) -> tensor<3x4xf32>
// expected-error@-1 {{comm.all_to_all: result #0 dim 0 (3) must divide operand dim 0 (8)}}

// -----

%d = "test.op"() : () -> tensor<4x2xf32>
%c = "test.op"() : () -> tensor<4xi64>
%v, %vc = comm.all_to_allv %d, %c : (tensor<4x2xf32>, tensor<4xi64>) -> (tensor<4x2xf32>, tensor<7xf32>)
// expected-error@-1 {{comm.all_to_allv: count result #0 must have the count operand's type tensor<4xi64>, got tensor<7xf32>}}

// -----

%d = "test.op"() : () -> tensor<4x2xf32>
%c = "test.op"() : () -> tensor<4xf32>
%v, %vc = comm.all_to_allv %d, %c : (tensor<4x2xf32>, tensor<4xf32>) -> (tensor<4x2xf32>, tensor<4xf32>)
// expected-error@-1 {{comm.all_to_allv: count operand #0 must hold integers, got tensor<4xf32>}}

// -----

%d = "test.op"() : () -> tensor<f32>
%c = "test.op"() : () -> tensor<4xi64>
%v, %vc = comm.all_to_allv %d, %c : (tensor<f32>, tensor<4xi64>) -> (tensor<f32>, tensor<4xi64>)
// expected-error@-1 {{comm.all_to_allv: data operand #0 must have a leading chunk dim, got tensor<f32>}}

// -----

%x = "test.op"() : () -> tensor<?xf32>
%g = comm.allgather %x group <[[0, 1]]> : (tensor<?xf32>) -> tensor<?xf32>
// expected-error@-1 {{comm.allgather: operand #0 has a dynamic shape (tensor<?xf32>); collectives need static shapes}}

// -----

builtin.module attributes {lancet.world_size = 4 : i64} {
  %x = "test.op"() : () -> tensor<8xf32>
  %r = comm.allreduce %x group <[[0, 9]]> : (tensor<8xf32>) -> tensor<8xf32>
}
// expected-error@-2 {{comm.allreduce: group rank 9 is outside the world of 4 ranks (lancet.world_size)}}

// -----

builtin.module attributes {lancet.world_size = 0 : i64} {
  %x = "test.op"() : () -> tensor<8xf32>
  %r = comm.allgather %x : (tensor<8xf32>) -> tensor<16xf32>
}
// expected-error@-2 {{comm.allgather: the enclosing lancet.world_size is 0, must be >= 1}}

// -----

%d = "test.op"() : () -> tensor<2x3x4xf32>
%c = "test.op"() : () -> tensor<2x4xi64>
%v, %vc = comm.all_to_allv %d, %c : (tensor<2x3x4xf32>, tensor<2x4xi64>) -> (tensor<2x3x4xf32>, tensor<2x4xi64>)
// expected-error@-1 {{comm.all_to_allv: count operand #0 must be tensor<2xi64> or tensor<2x3xi64>-like (a leading shape of the data [2, 3, 4]), got tensor<2x4xi64>}}
