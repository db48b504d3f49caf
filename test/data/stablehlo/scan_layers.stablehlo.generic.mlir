"builtin.module"() <{sym_name = "jit_train_step"}> ({
  "sdy.mesh"() <{mesh = #sdy.mesh<["dp"=4]>, sym_name = "mesh"}> {stablehlo.mesh = {axes = [{name = "dp", size = 4 : i64}]}} : () -> ()
  "func.func"() <{arg_attrs = [{}, {sdy.sharding = #sdy.sharding<@mesh, [{"dp"}, {}]>}, {sdy.sharding = #sdy.sharding<@mesh, [{"dp"}, {}]>}], function_type = (tensor<4x128x128xf32>, tensor<64x128xf32>, tensor<64x128xf32>) -> (tensor<4x128x128xf32>, tensor<f32>), res_attrs = [{jax.result_info = "result[0]", sdy.sharding = #sdy.sharding<@mesh, [{}, {}, {}]>}, {jax.result_info = "result[1]", sdy.sharding = #sdy.sharding<@mesh, []>}], sym_name = "main", sym_visibility = "public"}> ({
  ^bb0(%arg19: tensor<4x128x128xf32>, %arg20: tensor<64x128xf32>, %arg21: tensor<64x128xf32>):
    %32:2 = "sdy.manual_computation"(%arg19, %arg20, %arg21) <{in_shardings = #sdy.sharding_per_value<[<@mesh, [{}, {}, {}]>, <@mesh, [{"dp"}, {}]>, <@mesh, [{"dp"}, {}]>]>, manual_axes = #sdy<manual_axes{"dp"}>, out_shardings = #sdy.sharding_per_value<[<@mesh, [{}, {}, {}]>, <@mesh, []>]>}> ({
    ^bb0(%arg22: tensor<4x128x128xf32>, %arg23: tensor<16x128xf32>, %arg24: tensor<16x128xf32>):
      %33 = "stablehlo.constant"() <{value = dense<0.000000e+00> : tensor<f32>}> : () -> tensor<f32>
      %34 = "stablehlo.broadcast_in_dim"(%33) <{broadcast_dimensions = array<i64>}> : (tensor<f32>) -> tensor<4x16x128xf32>
      %35 = "stablehlo.constant"() <{value = dense<0.000000e+00> : tensor<f32>}> : () -> tensor<f32>
      %36 = "stablehlo.broadcast_in_dim"(%35) <{broadcast_dimensions = array<i64>}> : (tensor<f32>) -> tensor<4x16x128xf32>
      %37 = "stablehlo.constant"() <{value = dense<0.000000e+00> : tensor<f32>}> : () -> tensor<f32>
      %38 = "stablehlo.broadcast_in_dim"(%37) <{broadcast_dimensions = array<i64>}> : (tensor<f32>) -> tensor<4x16x128xf32>
      %39 = "stablehlo.constant"() <{value = dense<0> : tensor<i32>}> : () -> tensor<i32>
      %40:6 = "stablehlo.while"(%arg22, %39, %arg23, %34, %36, %38) ({
      ^bb0(%arg49: tensor<4x128x128xf32>, %arg50: tensor<i32>, %arg51: tensor<16x128xf32>, %arg52: tensor<4x16x128xf32>, %arg53: tensor<4x16x128xf32>, %arg54: tensor<4x16x128xf32>):
        %89 = "stablehlo.constant"() <{value = dense<4> : tensor<i32>}> : () -> tensor<i32>
        %90 = "stablehlo.compare"(%arg50, %89) <{compare_type = #stablehlo<comparison_type SIGNED>, comparison_direction = #stablehlo<comparison_direction LT>}> : (tensor<i32>, tensor<i32>) -> tensor<i1>
        "stablehlo.return"(%90) : (tensor<i1>) -> ()
      }, {
      ^bb0(%arg43: tensor<4x128x128xf32>, %arg44: tensor<i32>, %arg45: tensor<16x128xf32>, %arg46: tensor<4x16x128xf32>, %arg47: tensor<4x16x128xf32>, %arg48: tensor<4x16x128xf32>):
        %82 = "func.call"(%arg43, %arg44) <{callee = @dynamic_index_in_dim}> : (tensor<4x128x128xf32>, tensor<i32>) -> tensor<128x128xf32>
        %83:4 = "func.call"(%arg45, %82) <{callee = @closed_call}> : (tensor<16x128xf32>, tensor<128x128xf32>) -> (tensor<16x128xf32>, tensor<16x128xf32>, tensor<16x128xf32>, tensor<16x128xf32>)
        %84 = "func.call"(%arg46, %83#1, %arg44) <{callee = @dynamic_update_index_in_dim}> : (tensor<4x16x128xf32>, tensor<16x128xf32>, tensor<i32>) -> tensor<4x16x128xf32>
        %85 = "func.call"(%arg47, %83#2, %arg44) <{callee = @dynamic_update_index_in_dim}> : (tensor<4x16x128xf32>, tensor<16x128xf32>, tensor<i32>) -> tensor<4x16x128xf32>
        %86 = "func.call"(%arg48, %83#3, %arg44) <{callee = @dynamic_update_index_in_dim}> : (tensor<4x16x128xf32>, tensor<16x128xf32>, tensor<i32>) -> tensor<4x16x128xf32>
        %87 = "stablehlo.constant"() <{value = dense<1> : tensor<i32>}> : () -> tensor<i32>
        %88 = "stablehlo.add"(%arg44, %87) : (tensor<i32>, tensor<i32>) -> tensor<i32>
        "stablehlo.return"(%arg43, %88, %83#0, %84, %85, %86) : (tensor<4x128x128xf32>, tensor<i32>, tensor<16x128xf32>, tensor<4x16x128xf32>, tensor<4x16x128xf32>, tensor<4x16x128xf32>) -> ()
      }) : (tensor<4x128x128xf32>, tensor<i32>, tensor<16x128xf32>, tensor<4x16x128xf32>, tensor<4x16x128xf32>, tensor<4x16x128xf32>) -> (tensor<4x128x128xf32>, tensor<i32>, tensor<16x128xf32>, tensor<4x16x128xf32>, tensor<4x16x128xf32>, tensor<4x16x128xf32>)
      %41 = "stablehlo.subtract"(%40#2, %arg24) : (tensor<16x128xf32>, tensor<16x128xf32>) -> tensor<16x128xf32>
      %42 = "stablehlo.multiply"(%41, %41) : (tensor<16x128xf32>, tensor<16x128xf32>) -> tensor<16x128xf32>
      %43 = "stablehlo.constant"() <{value = dense<2.000000e+00> : tensor<f32>}> : () -> tensor<f32>
      %44 = "stablehlo.broadcast_in_dim"(%43) <{broadcast_dimensions = array<i64>}> : (tensor<f32>) -> tensor<16x128xf32>
      %45 = "stablehlo.multiply"(%44, %41) : (tensor<16x128xf32>, tensor<16x128xf32>) -> tensor<16x128xf32>
      %46 = "stablehlo.constant"() <{value = dense<0.000000e+00> : tensor<f32>}> : () -> tensor<f32>
      %47 = "stablehlo.reduce"(%42, %46) <{dimensions = array<i64: 0, 1>}> ({
      ^bb0(%arg41: tensor<f32>, %arg42: tensor<f32>):
        %81 = "stablehlo.add"(%arg41, %arg42) : (tensor<f32>, tensor<f32>) -> tensor<f32>
        "stablehlo.return"(%81) : (tensor<f32>) -> ()
      }) : (tensor<16x128xf32>, tensor<f32>) -> tensor<f32>
      %48 = "stablehlo.constant"() <{value = dense<2.048000e+03> : tensor<f32>}> : () -> tensor<f32>
      %49 = "stablehlo.divide"(%47, %48) : (tensor<f32>, tensor<f32>) -> tensor<f32>
      %50 = "stablehlo.constant"() <{value = dense<1.000000e+00> : tensor<f32>}> : () -> tensor<f32>
      %51 = "stablehlo.constant"() <{value = dense<2.048000e+03> : tensor<f32>}> : () -> tensor<f32>
      %52 = "stablehlo.divide"(%50, %51) : (tensor<f32>, tensor<f32>) -> tensor<f32>
      %53 = "stablehlo.broadcast_in_dim"(%52) <{broadcast_dimensions = array<i64>}> : (tensor<f32>) -> tensor<16x128xf32>
      %54 = "stablehlo.multiply"(%53, %45) : (tensor<16x128xf32>, tensor<16x128xf32>) -> tensor<16x128xf32>
      %55 = "stablehlo.constant"() <{value = dense<0.000000e+00> : tensor<f32>}> : () -> tensor<f32>
      %56 = "stablehlo.broadcast_in_dim"(%55) <{broadcast_dimensions = array<i64>}> : (tensor<f32>) -> tensor<4x128x128xf32>
      %57 = "stablehlo.constant"() <{value = dense<0> : tensor<i32>}> : () -> tensor<i32>
      %58:7 = "stablehlo.while"(%arg22, %40#3, %40#4, %40#5, %57, %54, %56) ({
      ^bb0(%arg34: tensor<4x128x128xf32>, %arg35: tensor<4x16x128xf32>, %arg36: tensor<4x16x128xf32>, %arg37: tensor<4x16x128xf32>, %arg38: tensor<i32>, %arg39: tensor<16x128xf32>, %arg40: tensor<4x128x128xf32>):
        %79 = "stablehlo.constant"() <{value = dense<4> : tensor<i32>}> : () -> tensor<i32>
        %80 = "stablehlo.compare"(%arg38, %79) <{compare_type = #stablehlo<comparison_type SIGNED>, comparison_direction = #stablehlo<comparison_direction LT>}> : (tensor<i32>, tensor<i32>) -> tensor<i1>
        "stablehlo.return"(%80) : (tensor<i1>) -> ()
      }, {
      ^bb0(%arg27: tensor<4x128x128xf32>, %arg28: tensor<4x16x128xf32>, %arg29: tensor<4x16x128xf32>, %arg30: tensor<4x16x128xf32>, %arg31: tensor<i32>, %arg32: tensor<16x128xf32>, %arg33: tensor<4x128x128xf32>):
        %67 = "stablehlo.constant"() <{value = dense<4> : tensor<i32>}> : () -> tensor<i32>
        %68 = "stablehlo.subtract"(%67, %arg31) : (tensor<i32>, tensor<i32>) -> tensor<i32>
        %69 = "stablehlo.constant"() <{value = dense<1> : tensor<i32>}> : () -> tensor<i32>
        %70 = "stablehlo.subtract"(%68, %69) : (tensor<i32>, tensor<i32>) -> tensor<i32>
        %71 = "func.call"(%arg27, %70) <{callee = @dynamic_index_in_dim}> : (tensor<4x128x128xf32>, tensor<i32>) -> tensor<128x128xf32>
        %72 = "func.call"(%arg28, %70) <{callee = @dynamic_index_in_dim_0}> : (tensor<4x16x128xf32>, tensor<i32>) -> tensor<16x128xf32>
        %73 = "func.call"(%arg29, %70) <{callee = @dynamic_index_in_dim_0}> : (tensor<4x16x128xf32>, tensor<i32>) -> tensor<16x128xf32>
        %74 = "func.call"(%arg30, %70) <{callee = @dynamic_index_in_dim_0}> : (tensor<4x16x128xf32>, tensor<i32>) -> tensor<16x128xf32>
        %75:2 = "func.call"(%arg32, %71, %72, %73, %74) <{callee = @closed_call_1}> : (tensor<16x128xf32>, tensor<128x128xf32>, tensor<16x128xf32>, tensor<16x128xf32>, tensor<16x128xf32>) -> (tensor<16x128xf32>, tensor<128x128xf32>)
        %76 = "func.call"(%arg33, %75#1, %70) <{callee = @dynamic_update_index_in_dim_2}> : (tensor<4x128x128xf32>, tensor<128x128xf32>, tensor<i32>) -> tensor<4x128x128xf32>
        %77 = "stablehlo.constant"() <{value = dense<1> : tensor<i32>}> : () -> tensor<i32>
        %78 = "stablehlo.add"(%arg31, %77) : (tensor<i32>, tensor<i32>) -> tensor<i32>
        "stablehlo.return"(%arg27, %arg28, %arg29, %arg30, %78, %75#0, %76) : (tensor<4x128x128xf32>, tensor<4x16x128xf32>, tensor<4x16x128xf32>, tensor<4x16x128xf32>, tensor<i32>, tensor<16x128xf32>, tensor<4x128x128xf32>) -> ()
      }) : (tensor<4x128x128xf32>, tensor<4x16x128xf32>, tensor<4x16x128xf32>, tensor<4x16x128xf32>, tensor<i32>, tensor<16x128xf32>, tensor<4x128x128xf32>) -> (tensor<4x128x128xf32>, tensor<4x16x128xf32>, tensor<4x16x128xf32>, tensor<4x16x128xf32>, tensor<i32>, tensor<16x128xf32>, tensor<4x128x128xf32>)
      %59 = "stablehlo.constant"() <{value = dense<1.000000e-01> : tensor<f32>}> : () -> tensor<f32>
      %60 = "stablehlo.broadcast_in_dim"(%59) <{broadcast_dimensions = array<i64>}> : (tensor<f32>) -> tensor<4x128x128xf32>
      %61 = "stablehlo.multiply"(%60, %58#6) : (tensor<4x128x128xf32>, tensor<4x128x128xf32>) -> tensor<4x128x128xf32>
      %62 = "stablehlo.subtract"(%arg22, %61) : (tensor<4x128x128xf32>, tensor<4x128x128xf32>) -> tensor<4x128x128xf32>
      %63 = "stablehlo.all_reduce"(%49) <{channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>, replica_groups = dense<[[0, 1, 2, 3]]> : tensor<1x4xi64>, use_global_device_ids}> ({
      ^bb0(%arg25: tensor<f32>, %arg26: tensor<f32>):
        %66 = "stablehlo.add"(%arg25, %arg26) : (tensor<f32>, tensor<f32>) -> tensor<f32>
        "stablehlo.return"(%66) : (tensor<f32>) -> ()
      }) : (tensor<f32>) -> tensor<f32>
      %64 = "stablehlo.constant"() <{value = dense<4.000000e+00> : tensor<f32>}> : () -> tensor<f32>
      %65 = "stablehlo.divide"(%63, %64) : (tensor<f32>, tensor<f32>) -> tensor<f32>
      "sdy.return"(%62, %65) : (tensor<4x128x128xf32>, tensor<f32>) -> ()
    }) : (tensor<4x128x128xf32>, tensor<64x128xf32>, tensor<64x128xf32>) -> (tensor<4x128x128xf32>, tensor<f32>)
    "func.return"(%32#0, %32#1) : (tensor<4x128x128xf32>, tensor<f32>) -> ()
  }) : () -> ()
  "func.func"() <{arg_attrs = [{}, {}], function_type = (tensor<4x128x128xf32>, tensor<i32>) -> tensor<128x128xf32>, res_attrs = [{}], sym_name = "dynamic_index_in_dim", sym_visibility = "private"}> ({
  ^bb0(%arg17: tensor<4x128x128xf32>, %arg18: tensor<i32>):
    %28 = "stablehlo.constant"() <{value = dense<0> : tensor<i32>}> : () -> tensor<i32>
    %29 = "stablehlo.constant"() <{value = dense<0> : tensor<i32>}> : () -> tensor<i32>
    %30 = "stablehlo.dynamic_slice"(%arg17, %arg18, %28, %29) <{slice_sizes = array<i64: 1, 128, 128>}> : (tensor<4x128x128xf32>, tensor<i32>, tensor<i32>, tensor<i32>) -> tensor<1x128x128xf32>
    %31 = "stablehlo.reshape"(%30) : (tensor<1x128x128xf32>) -> tensor<128x128xf32>
    "func.return"(%31) : (tensor<128x128xf32>) -> ()
  }) : () -> ()
  "func.func"() <{function_type = (tensor<16x128xf32>, tensor<128x128xf32>) -> (tensor<16x128xf32>, tensor<16x128xf32>, tensor<16x128xf32>, tensor<16x128xf32>), res_attrs = [{}, {}, {}, {}], sym_name = "closed_call", sym_visibility = "private"}> ({
  ^bb0(%arg15: tensor<16x128xf32>, %arg16: tensor<128x128xf32>):
    %23 = "stablehlo.dot_general"(%arg15, %arg16) <{dot_dimension_numbers = #stablehlo.dot<lhs_contracting_dimensions = [1], rhs_contracting_dimensions = [0]>, precision_config = [#stablehlo<precision DEFAULT>, #stablehlo<precision DEFAULT>]}> : (tensor<16x128xf32>, tensor<128x128xf32>) -> tensor<16x128xf32>
    %24 = "stablehlo.tanh"(%23) : (tensor<16x128xf32>) -> tensor<16x128xf32>
    %25 = "stablehlo.constant"() <{value = dense<1.000000e+00> : tensor<f32>}> : () -> tensor<f32>
    %26 = "stablehlo.broadcast_in_dim"(%25) <{broadcast_dimensions = array<i64>}> : (tensor<f32>) -> tensor<16x128xf32>
    %27 = "stablehlo.subtract"(%26, %24) : (tensor<16x128xf32>, tensor<16x128xf32>) -> tensor<16x128xf32>
    "func.return"(%24, %arg15, %24, %27) : (tensor<16x128xf32>, tensor<16x128xf32>, tensor<16x128xf32>, tensor<16x128xf32>) -> ()
  }) : () -> ()
  "func.func"() <{arg_attrs = [{}, {}, {}], function_type = (tensor<4x16x128xf32>, tensor<16x128xf32>, tensor<i32>) -> tensor<4x16x128xf32>, res_attrs = [{}], sym_name = "dynamic_update_index_in_dim", sym_visibility = "private"}> ({
  ^bb0(%arg12: tensor<4x16x128xf32>, %arg13: tensor<16x128xf32>, %arg14: tensor<i32>):
    %19 = "stablehlo.broadcast_in_dim"(%arg13) <{broadcast_dimensions = array<i64: 1, 2>}> : (tensor<16x128xf32>) -> tensor<1x16x128xf32>
    %20 = "stablehlo.constant"() <{value = dense<0> : tensor<i32>}> : () -> tensor<i32>
    %21 = "stablehlo.constant"() <{value = dense<0> : tensor<i32>}> : () -> tensor<i32>
    %22 = "stablehlo.dynamic_update_slice"(%arg12, %19, %arg14, %20, %21) : (tensor<4x16x128xf32>, tensor<1x16x128xf32>, tensor<i32>, tensor<i32>, tensor<i32>) -> tensor<4x16x128xf32>
    "func.return"(%22) : (tensor<4x16x128xf32>) -> ()
  }) : () -> ()
  "func.func"() <{arg_attrs = [{}, {}], function_type = (tensor<4x16x128xf32>, tensor<i32>) -> tensor<16x128xf32>, res_attrs = [{}], sym_name = "dynamic_index_in_dim_0", sym_visibility = "private"}> ({
  ^bb0(%arg10: tensor<4x16x128xf32>, %arg11: tensor<i32>):
    %15 = "stablehlo.constant"() <{value = dense<0> : tensor<i32>}> : () -> tensor<i32>
    %16 = "stablehlo.constant"() <{value = dense<0> : tensor<i32>}> : () -> tensor<i32>
    %17 = "stablehlo.dynamic_slice"(%arg10, %arg11, %15, %16) <{slice_sizes = array<i64: 1, 16, 128>}> : (tensor<4x16x128xf32>, tensor<i32>, tensor<i32>, tensor<i32>) -> tensor<1x16x128xf32>
    %18 = "stablehlo.reshape"(%17) : (tensor<1x16x128xf32>) -> tensor<16x128xf32>
    "func.return"(%18) : (tensor<16x128xf32>) -> ()
  }) : () -> ()
  "func.func"() <{function_type = (tensor<16x128xf32>, tensor<128x128xf32>, tensor<16x128xf32>, tensor<16x128xf32>, tensor<16x128xf32>) -> (tensor<16x128xf32>, tensor<128x128xf32>), res_attrs = [{}, {}], sym_name = "closed_call_1", sym_visibility = "private"}> ({
  ^bb0(%arg3: tensor<16x128xf32>, %arg4: tensor<128x128xf32>, %arg5: tensor<16x128xf32>, %arg6: tensor<16x128xf32>, %arg7: tensor<16x128xf32>):
    %4 = "stablehlo.multiply"(%arg3, %arg7) : (tensor<16x128xf32>, tensor<16x128xf32>) -> tensor<16x128xf32>
    %5 = "stablehlo.multiply"(%4, %arg6) : (tensor<16x128xf32>, tensor<16x128xf32>) -> tensor<16x128xf32>
    %6 = "stablehlo.add"(%4, %5) : (tensor<16x128xf32>, tensor<16x128xf32>) -> tensor<16x128xf32>
    %7 = "stablehlo.dot_general"(%6, %arg5) <{dot_dimension_numbers = #stablehlo.dot<lhs_contracting_dimensions = [0], rhs_contracting_dimensions = [0]>, precision_config = [#stablehlo<precision DEFAULT>, #stablehlo<precision DEFAULT>]}> : (tensor<16x128xf32>, tensor<16x128xf32>) -> tensor<128x128xf32>
    %8 = "stablehlo.transpose"(%7) <{permutation = array<i64: 1, 0>}> : (tensor<128x128xf32>) -> tensor<128x128xf32>
    %9 = "stablehlo.dot_general"(%6, %arg4) <{dot_dimension_numbers = #stablehlo.dot<lhs_contracting_dimensions = [1], rhs_contracting_dimensions = [1]>, precision_config = [#stablehlo<precision DEFAULT>, #stablehlo<precision DEFAULT>]}> : (tensor<16x128xf32>, tensor<128x128xf32>) -> tensor<16x128xf32>
    %10 = "stablehlo.all_reduce"(%8) <{channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>, replica_groups = dense<[[0, 1, 2, 3]]> : tensor<1x4xi64>, use_global_device_ids}> ({
    ^bb0(%arg8: tensor<f32>, %arg9: tensor<f32>):
      %14 = "stablehlo.add"(%arg8, %arg9) : (tensor<f32>, tensor<f32>) -> tensor<f32>
      "stablehlo.return"(%14) : (tensor<f32>) -> ()
    }) : (tensor<128x128xf32>) -> tensor<128x128xf32>
    %11 = "stablehlo.constant"() <{value = dense<4.000000e+00> : tensor<f32>}> : () -> tensor<f32>
    %12 = "stablehlo.broadcast_in_dim"(%11) <{broadcast_dimensions = array<i64>}> : (tensor<f32>) -> tensor<128x128xf32>
    %13 = "stablehlo.divide"(%10, %12) : (tensor<128x128xf32>, tensor<128x128xf32>) -> tensor<128x128xf32>
    "func.return"(%9, %13) : (tensor<16x128xf32>, tensor<128x128xf32>) -> ()
  }) : () -> ()
  "func.func"() <{arg_attrs = [{}, {}, {}], function_type = (tensor<4x128x128xf32>, tensor<128x128xf32>, tensor<i32>) -> tensor<4x128x128xf32>, res_attrs = [{}], sym_name = "dynamic_update_index_in_dim_2", sym_visibility = "private"}> ({
  ^bb0(%arg0: tensor<4x128x128xf32>, %arg1: tensor<128x128xf32>, %arg2: tensor<i32>):
    %0 = "stablehlo.broadcast_in_dim"(%arg1) <{broadcast_dimensions = array<i64: 1, 2>}> : (tensor<128x128xf32>) -> tensor<1x128x128xf32>
    %1 = "stablehlo.constant"() <{value = dense<0> : tensor<i32>}> : () -> tensor<i32>
    %2 = "stablehlo.constant"() <{value = dense<0> : tensor<i32>}> : () -> tensor<i32>
    %3 = "stablehlo.dynamic_update_slice"(%arg0, %0, %arg2, %1, %2) : (tensor<4x128x128xf32>, tensor<1x128x128xf32>, tensor<i32>, tensor<i32>, tensor<i32>) -> tensor<4x128x128xf32>
    "func.return"(%3) : (tensor<4x128x128xf32>) -> ()
  }) : () -> ()
}) {mhlo.num_partitions = 4 : i32, mhlo.num_replicas = 1 : i32} : () -> ()
