"builtin.module"() <{sym_name = "async_collectives"}> ({
  "func.func"() <{function_type = (tensor<4x8xf32>) -> tensor<8x8xf32>, sym_name = "all_gather_computation", sym_visibility = "private"}> ({
  ^bb0(%p: tensor<4x8xf32>):
    %g = "mhlo.all_gather"(%p) <{all_gather_dim = 0 : i64, channel_handle = #mhlo.channel_handle<handle = 2, type = 0>, replica_groups = dense<[[0, 1], [2, 3]]> : tensor<2x2xi64>, use_global_device_ids}> : (tensor<4x8xf32>) -> tensor<8x8xf32>
    "func.return"(%g) : (tensor<8x8xf32>) -> ()
  }) {execution_thread = "main"} : () -> ()
  "func.func"() <{function_type = (tensor<16x8xf32>, tensor<8x8xf32>, tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<4x16xf32>, tensor<16x8xf32>), sym_name = "main", sym_visibility = "public"}> ({
  ^bb0(%x: tensor<16x8xf32>, %w: tensor<8x8xf32>, %b: tensor<4x8xf32>):
    %0 = "stablehlo.dot_general"(%x, %w) <{dot_dimension_numbers = #stablehlo.dot<lhs_contracting_dimensions = [1], rhs_contracting_dimensions = [0]>}> : (tensor<16x8xf32>, tensor<8x8xf32>) -> tensor<16x8xf32>
    %1 = "stablehlo.async_start"(%0) ({
    ^bb0(%a: tensor<16x8xf32>):
      %r = "stablehlo.all_reduce"(%a) <{channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>, replica_groups = dense<[[0, 1, 2, 3]]> : tensor<1x4xi64>, use_global_device_ids}> ({
      ^bb1(%l: tensor<f32>, %m: tensor<f32>):
        %s = "stablehlo.add"(%l, %m) : (tensor<f32>, tensor<f32>) -> tensor<f32>
        "stablehlo.return"(%s) : (tensor<f32>) -> ()
      }) : (tensor<16x8xf32>) -> tensor<16x8xf32>
      "stablehlo.return"(%r) : (tensor<16x8xf32>) -> ()
    }) : (tensor<16x8xf32>) -> !stablehlo.future<tensor<16x8xf32>>
    %2 = "stablehlo.tanh"(%x) : (tensor<16x8xf32>) -> tensor<16x8xf32>
    %3 = "stablehlo.async_done"(%1) : (!stablehlo.future<tensor<16x8xf32>>) -> tensor<16x8xf32>
    %4 = "mhlo.async_start"(%b) <{called_computation = @all_gather_computation, execution_thread = "main"}> : (tensor<4x8xf32>) -> !mhlo.async_bundle<tensor<4x8xf32>, tensor<8x8xf32>>
    %5 = "mhlo.async_update"(%4) : (!mhlo.async_bundle<tensor<4x8xf32>, tensor<8x8xf32>>) -> !mhlo.async_bundle<tensor<4x8xf32>, tensor<8x8xf32>>
    %6 = "stablehlo.add"(%2, %2) : (tensor<16x8xf32>, tensor<16x8xf32>) -> tensor<16x8xf32>
    %7 = "mhlo.async_done"(%5) : (!mhlo.async_bundle<tensor<4x8xf32>, tensor<8x8xf32>>) -> tensor<8x8xf32>
    %8 = "stablehlo.async_start"(%6, %7) ({
    ^bb0(%c: tensor<16x8xf32>, %d: tensor<8x8xf32>):
      %q:2 = "stablehlo.all_reduce"(%c, %d) <{replica_groups = dense<[[0, 1, 2, 3]]> : tensor<1x4xi64>}> ({
      ^bb1(%l: tensor<f32>, %m: tensor<f32>):
        %s = "stablehlo.maximum"(%l, %m) : (tensor<f32>, tensor<f32>) -> tensor<f32>
        "stablehlo.return"(%s) : (tensor<f32>) -> ()
      }) : (tensor<16x8xf32>, tensor<8x8xf32>) -> (tensor<16x8xf32>, tensor<8x8xf32>)
      %t = "stablehlo.tuple"(%q#0, %q#1) : (tensor<16x8xf32>, tensor<8x8xf32>) -> tuple<tensor<16x8xf32>, tensor<8x8xf32>>
      "stablehlo.return"(%t) : (tuple<tensor<16x8xf32>, tensor<8x8xf32>>) -> ()
    }) : (tensor<16x8xf32>, tensor<8x8xf32>) -> !stablehlo.future<tuple<tensor<16x8xf32>, tensor<8x8xf32>>>
    %9 = "stablehlo.multiply"(%x, %x) : (tensor<16x8xf32>, tensor<16x8xf32>) -> tensor<16x8xf32>
    %10 = "stablehlo.async_done"(%8) : (!stablehlo.future<tuple<tensor<16x8xf32>, tensor<8x8xf32>>>) -> tuple<tensor<16x8xf32>, tensor<8x8xf32>>
    %11 = "stablehlo.get_tuple_element"(%10) <{index = 0 : i32}> : (tuple<tensor<16x8xf32>, tensor<8x8xf32>>) -> tensor<16x8xf32>
    %12 = "stablehlo.get_tuple_element"(%10) <{index = 1 : i32}> : (tuple<tensor<16x8xf32>, tensor<8x8xf32>>) -> tensor<8x8xf32>
    %13 = "stablehlo.reduce_scatter"(%11) <{replica_groups = dense<[[0, 1, 2, 3]]> : tensor<1x4xi64>, scatter_dimension = 0 : i64}> ({
    ^bb0(%l: tensor<f32>, %m: tensor<f32>):
      %s = "stablehlo.multiply"(%l, %m) : (tensor<f32>, tensor<f32>) -> tensor<f32>
      "stablehlo.return"(%s) : (tensor<f32>) -> ()
    }) : (tensor<16x8xf32>) -> tensor<4x8xf32>
    %14 = "stablehlo.all_to_all"(%12) <{concat_dimension = 1 : i64, replica_groups = dense<[[0, 2], [1, 3]]> : tensor<2x2xi64>, split_count = 2 : i64, split_dimension = 0 : i64}> : (tensor<8x8xf32>) -> tensor<4x16xf32>
    %15 = "stablehlo.tuple"(%9, %3) : (tensor<16x8xf32>, tensor<16x8xf32>) -> tuple<tensor<16x8xf32>, tensor<16x8xf32>>
    %16 = "mhlo.all_reduce"(%15) <{replica_groups = dense<> : tensor<0x0xi64>}> ({
    ^bb0(%l: tensor<f32>, %m: tensor<f32>):
      %s = "mhlo.minimum"(%l, %m) : (tensor<f32>, tensor<f32>) -> tensor<f32>
      "mhlo.return"(%s) : (tensor<f32>) -> ()
    }) : (tuple<tensor<16x8xf32>, tensor<16x8xf32>>) -> tuple<tensor<16x8xf32>, tensor<16x8xf32>>
    %17 = "stablehlo.get_tuple_element"(%16) <{index = 1 : i32}> : (tuple<tensor<16x8xf32>, tensor<16x8xf32>>) -> tensor<16x8xf32>
    %18 = "mhlo.fusion"(%13, %b, %17) <{fusion_kind = #mhlo<fusion_kind kLoop>}> ({
    ^bb0(%u: tensor<4x8xf32>, %v: tensor<4x8xf32>, %z: tensor<16x8xf32>):
      %e = "stablehlo.multiply"(%u, %v) : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
      %f = "stablehlo.slice"(%z) <{limit_indices = array<i64: 8, 8>, start_indices = array<i64: 0, 0>, strides = array<i64: 2, 1>}> : (tensor<16x8xf32>) -> tensor<4x8xf32>
      %h = "stablehlo.add"(%e, %f) : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
      "mhlo.return"(%h) : (tensor<4x8xf32>) -> ()
    }) : (tensor<4x8xf32>, tensor<4x8xf32>, tensor<16x8xf32>) -> tensor<4x8xf32>
    "func.return"(%18, %14, %3) : (tensor<4x8xf32>, tensor<4x16xf32>, tensor<16x8xf32>) -> ()
  }) : () -> ()
}) {mhlo.num_partitions = 4 : i32, mhlo.num_replicas = 1 : i32} : () -> ()
