// RUN: lancet-opt %s --allow-unregistered-dialect -p import-stablehlo --split-input-file | filecheck %s
// RUN: lancet-opt %S/../data/stablehlo/moe_step.cpu.scheduled.generic.mlir --allow-unregistered-dialect -p import-stablehlo,data-parallel-schedule | filecheck %s --check-prefix=CPU
// RUN: lancet-opt %S/../data/stablehlo/moe_step.stablehlo.generic.mlir --allow-unregistered-dialect -p import-stablehlo | filecheck %s --check-prefix=SDY

// A synchronous all-reduce keeps its position; the group comes from replica_groups, the
// reduction from the region; a dot_general gets 2*M*N*K FLOPs and its I/O bytes.
"func.func"() <{function_type = (tensor<16x8xf32>, tensor<8x4xf32>) -> tensor<16x4xf32>, sym_name = "sync"}> ({
^bb0(%x: tensor<16x8xf32>, %w: tensor<8x4xf32>):
  %0 = "stablehlo.dot_general"(%x, %w) <{dot_dimension_numbers = #stablehlo.dot<lhs_contracting_dimensions = [1], rhs_contracting_dimensions = [0]>}> : (tensor<16x8xf32>, tensor<8x4xf32>) -> tensor<16x4xf32>
  %1 = "stablehlo.all_reduce"(%0) <{replica_groups = dense<[[0, 1], [2, 3]]> : tensor<2x2xi64>}> ({
  ^bb1(%a: tensor<f32>, %b: tensor<f32>):
    %m = "stablehlo.maximum"(%a, %b) : (tensor<f32>, tensor<f32>) -> tensor<f32>
    "stablehlo.return"(%m) : (tensor<f32>) -> ()
  }) : (tensor<16x4xf32>) -> tensor<16x4xf32>
  %2 = "stablehlo.tanh"(%1) : (tensor<16x4xf32>) -> tensor<16x4xf32>
  "func.return"(%2) : (tensor<16x4xf32>) -> ()
}) : () -> ()

// the groups name ranks 0..3: a world of 4 (no mhlo.num_partitions to say otherwise)
// CHECK:       builtin.module attributes {lancet.world_size = 4 : i64}
// CHECK-LABEL: func.func @sync
// CHECK-NEXT:    %0 = "stablehlo.dot_general"(%x, %w) {{.*}}{lancet.flops = 1.024000e+03 : f64, lancet.bytes = 8.960000e+02 : f64}
// CHECK-NEXT:    %1 = comm.allreduce %0 reduce max group <{{\[\[}}0, 1], [2, 3]]> {lancet.hlo_op = "stablehlo.all_reduce"} : (tensor<16x4xf32>) -> tensor<16x4xf32>
// CHECK-NEXT:    %2 = "stablehlo.tanh"(%1) {lancet.flops = 6.400000e+01 : f64, lancet.bytes = 5.120000e+02 : f64}
// CHECK-NEXT:    func.return %2

// -----

// An async pair becomes one comm op at the start's position; the done's uses take its result.
"func.func"() <{function_type = (tensor<8x4xf32>) -> tensor<32x4xf32>, sym_name = "async"}> ({
^bb0(%x: tensor<8x4xf32>):
  %s = "stablehlo.async_start"(%x) ({
  ^bb0(%a: tensor<8x4xf32>):
    %g = "stablehlo.all_gather"(%a) <{all_gather_dim = 0 : i64, replica_groups = dense<[[0, 1, 2, 3]]> : tensor<1x4xi64>}> : (tensor<8x4xf32>) -> tensor<32x4xf32>
    "stablehlo.return"(%g) : (tensor<32x4xf32>) -> ()
  }) : (tensor<8x4xf32>) -> !stablehlo.future<tensor<32x4xf32>>
  %e = "stablehlo.exponential"(%x) : (tensor<8x4xf32>) -> tensor<8x4xf32>
  %d = "stablehlo.async_done"(%s) : (!stablehlo.future<tensor<32x4xf32>>) -> tensor<32x4xf32>
  "func.return"(%d) : (tensor<32x4xf32>) -> ()
}) : () -> ()

// CHECK-LABEL: func.func @async
// CHECK-NEXT:    %d = comm.allgather %x group <{{\[\[}}0, 1, 2, 3]]> {lancet.hlo_op = "stablehlo.all_gather", lancet.hlo_async} : (tensor<8x4xf32>) -> tensor<32x4xf32>
// CHECK-NEXT:    %e = "stablehlo.exponential"(%x)
// CHECK-NEXT:    func.return %d : tensor<32x4xf32>

// XLA-CPU module: the fused variadic all-reduce and the array all-to-all glue.
// CPU:     builtin.module @jit_train_step attributes {{{.*}}lancet.world_size = 8 : i64}
// CPU:     comp.concat {{.*}}lancet.import_glue
// CPU-NEXT: comm.all_to_all {{%[0-9]+}} group <{{\[\[}}0, 1, 2, 3, 4, 5, 6, 7]]> {lancet.hlo_op = "mhlo.all_to_all"} : (tensor<8x1x8x64xf32>) -> tensor<8x1x8x64xf32>
// CPU:     comp.split {{%[0-9]+}} {num = 8 : i64, {{.*}}lancet.import_glue}
// CPU:     comm.allreduce {{.*}} : (tensor<64x8xf32>, tensor<64x64xf32>, tensor<64x64xf32>, tensor<f32>) -> (tensor<64x8xf32>, tensor<64x64xf32>, tensor<64x64xf32>, tensor<f32>)
// CPU:     comm.reduce_scatter {{.*}} : (tensor<64x64xf32>) -> tensor<8x64xf32>
// CPU:     comm.allgather {{.*}} : (tensor<8x64xf32>) -> tensor<64x64xf32>

// Shardy module: the shard_map body inside sdy.manual_computation (parsed thanks to the stubs).
// SDY:     "sdy.manual_computation"
// SDY:     func.call @argmax({{.*}}) {lancet.flops =
// SDY:     comm.all_to_all {{%[0-9]+}} group <{{\[\[}}0, 1, 2, 3, 4, 5, 6, 7]]> {lancet.hlo_op = "stablehlo.all_to_all"} : (tensor<8x1x8x64xf32>) -> tensor<8x1x8x64xf32>
// SDY-NOT: = "stablehlo.all_reduce"(
