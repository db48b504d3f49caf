"builtin.module"() <{sym_name = "jit_train_step"}> ({
  "sdy.mesh"() <{mesh = #sdy.mesh<["dp"=4]>, sym_name = "mesh"}> {stablehlo.mesh = {axes = [{name = "dp", size = 4 : i64}]}} : () -> ()
  "func.func"() <{arg_attrs = [{}, {}, {}, {}, {}, {}, {sdy.sharding = #sdy.sharding<@mesh, [{"dp"}, {}]>}, {sdy.sharding = #sdy.sharding<@mesh, [{"dp"}, {}]>}], function_type = (tensor<256xf32>, tensor<256xf32>, tensor<64xf32>, tensor<64x256xf32>, tensor<256x256xf32>, tensor<256x64xf32>, tensor<64x64xf32>, tensor<64x64xf32>) -> (tensor<256xf32>, tensor<256xf32>, tensor<64xf32>, tensor<64x256xf32>, tensor<256x256xf32>, tensor<256x64xf32>, tensor<f32>), res_attrs = [{jax.result_info = "result[0]['b1']", sdy.sharding = #sdy.sharding<@mesh, [{}]>}, {jax.result_info = "result[0]['b2']", sdy.sharding = #sdy.sharding<@mesh, [{}]>}, {jax.result_info = "result[0]['b3']", sdy.sharding = #sdy.sharding<@mesh, [{}]>}, {jax.result_info = "result[0]['w1']", sdy.sharding = #sdy.sharding<@mesh, [{}, {}]>}, {jax.result_info = "result[0]['w2']", sdy.sharding = #sdy.sharding<@mesh, [{}, {}]>}, {jax.result_info = "result[0]['w3']", sdy.sharding = #sdy.sharding<@mesh, [{}, {}]>}, {jax.result_info = "result[1]", sdy.sharding = #sdy.sharding<@mesh, []>}], sym_name = "main", sym_visibility = "public"}> ({
  ^bb0(%arg1: tensor<256xf32>, %arg2: tensor<256xf32>, %arg3: tensor<64xf32>, %arg4: tensor<64x256xf32>, %arg5: tensor<256x256xf32>, %arg6: tensor<256x64xf32>, %arg7: tensor<64x64xf32>, %arg8: tensor<64x64xf32>):
    %3:7 = "sdy.manual_computation"(%arg1, %arg2, %arg3, %arg4, %arg5, %arg6, %arg7, %arg8) <{in_shardings = #sdy.sharding_per_value<[<@mesh, [{}]>, <@mesh, [{}]>, <@mesh, [{}]>, <@mesh, [{}, {}]>, <@mesh, [{}, {}]>, <@mesh, [{}, {}]>, <@mesh, [{"dp"}, {}]>, <@mesh, [{"dp"}, {}]>]>, manual_axes = #sdy<manual_axes{"dp"}>, out_shardings = #sdy.sharding_per_value<[<@mesh, [{}]>, <@mesh, [{}]>, <@mesh, [{}]>, <@mesh, [{}, {}]>, <@mesh, [{}, {}]>, <@mesh, [{}, {}]>, <@mesh, []>]>}> ({
    ^bb0(%arg9: tensor<256xf32>, %arg10: tensor<256xf32>, %arg11: tensor<64xf32>, %arg12: tensor<64x256xf32>, %arg13: tensor<256x256xf32>, %arg14: tensor<256x64xf32>, %arg15: tensor<16x64xf32>, %arg16: tensor<16x64xf32>):
      %4 = "stablehlo.dot_general"(%arg15, %arg12) <{dot_dimension_numbers = #stablehlo.dot<lhs_contracting_dimensions = [1], rhs_contracting_dimensions = [0]>, precision_config = [#stablehlo<precision DEFAULT>, #stablehlo<precision DEFAULT>]}> : (tensor<16x64xf32>, tensor<64x256xf32>) -> tensor<16x256xf32>
      %5 = "stablehlo.broadcast_in_dim"(%arg9) <{broadcast_dimensions = array<i64: 1>}> : (tensor<256xf32>) -> tensor<1x256xf32>
      %6 = "stablehlo.broadcast_in_dim"(%5) <{broadcast_dimensions = array<i64: 0, 1>}> : (tensor<1x256xf32>) -> tensor<16x256xf32>
      %7 = "stablehlo.add"(%4, %6) : (tensor<16x256xf32>, tensor<16x256xf32>) -> tensor<16x256xf32>
      %8 = "func.call"(%7) <{callee = @relu}> : (tensor<16x256xf32>) -> tensor<16x256xf32>
      %9 = "stablehlo.constant"() <{value = dense<0.000000e+00> : tensor<f32>}> : () -> tensor<f32>
      %10 = "stablehlo.broadcast_in_dim"(%9) <{broadcast_dimensions = array<i64>}> : (tensor<f32>) -> tensor<16x256xf32>
      %11 = "stablehlo.compare"(%7, %10) <{compare_type = #stablehlo<comparison_type FLOAT>, comparison_direction = #stablehlo<comparison_direction GT>}> : (tensor<16x256xf32>, tensor<16x256xf32>) -> tensor<16x256xi1>
      %12 = "stablehlo.dot_general"(%8, %arg13) <{dot_dimension_numbers = #stablehlo.dot<lhs_contracting_dimensions = [1], rhs_contracting_dimensions = [0]>, precision_config = [#stablehlo<precision DEFAULT>, #stablehlo<precision DEFAULT>]}> : (tensor<16x256xf32>, tensor<256x256xf32>) -> tensor<16x256xf32>
      %13 = "stablehlo.broadcast_in_dim"(%arg10) <{broadcast_dimensions = array<i64: 1>}> : (tensor<256xf32>) -> tensor<1x256xf32>
      %14 = "stablehlo.broadcast_in_dim"(%13) <{broadcast_dimensions = array<i64: 0, 1>}> : (tensor<1x256xf32>) -> tensor<16x256xf32>
      %15 = "stablehlo.add"(%12, %14) : (tensor<16x256xf32>, tensor<16x256xf32>) -> tensor<16x256xf32>
      %16 = "func.call"(%15) <{callee = @relu}> : (tensor<16x256xf32>) -> tensor<16x256xf32>
      %17 = "stablehlo.constant"() <{value = dense<0.000000e+00> : tensor<f32>}> : () -> tensor<f32>
      %18 = "stablehlo.broadcast_in_dim"(%17) <{broadcast_dimensions = array<i64>}> : (tensor<f32>) -> tensor<16x256xf32>
      %19 = "stablehlo.compare"(%15, %18) <{compare_type = #stablehlo<comparison_type FLOAT>, comparison_direction = #stablehlo<comparison_direction GT>}> : (tensor<16x256xf32>, tensor<16x256xf32>) -> tensor<16x256xi1>
      %20 = "stablehlo.dot_general"(%16, %arg14) <{dot_dimension_numbers = #stablehlo.dot<lhs_contracting_dimensions = [1], rhs_contracting_dimensions = [0]>, precision_config = [#stablehlo<precision DEFAULT>, #stablehlo<precision DEFAULT>]}> : (tensor<16x256xf32>, tensor<256x64xf32>) -> tensor<16x64xf32>
      %21 = "stablehlo.broadcast_in_dim"(%arg11) <{broadcast_dimensions = array<i64: 1>}> : (tensor<64xf32>) -> tensor<1x64xf32>
      %22 = "stablehlo.broadcast_in_dim"(%21) <{broadcast_dimensions = array<i64: 0, 1>}> : (tensor<1x64xf32>) -> tensor<16x64xf32>
      %23 = "stablehlo.add"(%20, %22) : (tensor<16x64xf32>, tensor<16x64xf32>) -> tensor<16x64xf32>
      %24 = "stablehlo.subtract"(%23, %arg16) : (tensor<16x64xf32>, tensor<16x64xf32>) -> tensor<16x64xf32>
      %25 = "stablehlo.multiply"(%24, %24) : (tensor<16x64xf32>, tensor<16x64xf32>) -> tensor<16x64xf32>
      %26 = "stablehlo.constant"() <{value = dense<2.000000e+00> : tensor<f32>}> : () -> tensor<f32>
      %27 = "stablehlo.broadcast_in_dim"(%26) <{broadcast_dimensions = array<i64>}> : (tensor<f32>) -> tensor<16x64xf32>
      %28 = "stablehlo.multiply"(%27, %24) : (tensor<16x64xf32>, tensor<16x64xf32>) -> tensor<16x64xf32>
      %29 = "stablehlo.constant"() <{value = dense<0.000000e+00> : tensor<f32>}> : () -> tensor<f32>
      %30 = "stablehlo.reduce"(%25, %29) <{dimensions = array<i64: 0, 1>}> ({
      ^bb0(%arg43: tensor<f32>, %arg44: tensor<f32>):
        %131 = "stablehlo.add"(%arg43, %arg44) : (tensor<f32>, tensor<f32>) -> tensor<f32>
        "stablehlo.return"(%131) : (tensor<f32>) -> ()
      }) : (tensor<16x64xf32>, tensor<f32>) -> tensor<f32>
      %31 = "stablehlo.constant"() <{value = dense<1.024000e+03> : tensor<f32>}> : () -> tensor<f32>
      %32 = "stablehlo.divide"(%30, %31) : (tensor<f32>, tensor<f32>) -> tensor<f32>
      %33 = "stablehlo.constant"() <{value = dense<1.000000e+00> : tensor<f32>}> : () -> tensor<f32>
      %34 = "stablehlo.constant"() <{value = dense<1.024000e+03> : tensor<f32>}> : () -> tensor<f32>
      %35 = "stablehlo.divide"(%33, %34) : (tensor<f32>, tensor<f32>) -> tensor<f32>
      %36 = "stablehlo.broadcast_in_dim"(%35) <{broadcast_dimensions = array<i64>}> : (tensor<f32>) -> tensor<16x64xf32>
      %37 = "stablehlo.multiply"(%36, %28) : (tensor<16x64xf32>, tensor<16x64xf32>) -> tensor<16x64xf32>
      %38 = "stablehlo.constant"() <{value = dense<0.000000e+00> : tensor<f32>}> : () -> tensor<f32>
      %39 = "stablehlo.reduce"(%37, %38) <{dimensions = array<i64: 0>}> ({
      ^bb0(%arg41: tensor<f32>, %arg42: tensor<f32>):
        %130 = "stablehlo.add"(%arg41, %arg42) : (tensor<f32>, tensor<f32>) -> tensor<f32>
        "stablehlo.return"(%130) : (tensor<f32>) -> ()
      }) : (tensor<16x64xf32>, tensor<f32>) -> tensor<64xf32>
      %40 = "stablehlo.reshape"(%39) : (tensor<64xf32>) -> tensor<1x64xf32>
      %41 = "stablehlo.constant"() <{value = dense<0.000000e+00> : tensor<f32>}> : () -> tensor<f32>
      %42 = "stablehlo.reduce"(%40, %41) <{dimensions = array<i64: 0>}> ({
      ^bb0(%arg39: tensor<f32>, %arg40: tensor<f32>):
        %129 = "stablehlo.add"(%arg39, %arg40) : (tensor<f32>, tensor<f32>) -> tensor<f32>
        "stablehlo.return"(%129) : (tensor<f32>) -> ()
      }) : (tensor<1x64xf32>, tensor<f32>) -> tensor<64xf32>
      %43 = "stablehlo.dot_general"(%37, %16) <{dot_dimension_numbers = #stablehlo.dot<lhs_contracting_dimensions = [0], rhs_contracting_dimensions = [0]>, precision_config = [#stablehlo<precision DEFAULT>, #stablehlo<precision DEFAULT>]}> : (tensor<16x64xf32>, tensor<16x256xf32>) -> tensor<64x256xf32>
      %44 = "stablehlo.transpose"(%43) <{permutation = array<i64: 1, 0>}> : (tensor<64x256xf32>) -> tensor<256x64xf32>
      %45 = "stablehlo.dot_general"(%37, %arg14) <{dot_dimension_numbers = #stablehlo.dot<lhs_contracting_dimensions = [1], rhs_contracting_dimensions = [1]>, precision_config = [#stablehlo<precision DEFAULT>, #stablehlo<precision DEFAULT>]}> : (tensor<16x64xf32>, tensor<256x64xf32>) -> tensor<16x256xf32>
      %46 = "stablehlo.constant"() <{value = dense<0.000000e+00> : tensor<f32>}> : () -> tensor<f32>
      %47 = "stablehlo.broadcast_in_dim"(%46) <{broadcast_dimensions = array<i64>}> : (tensor<f32>) -> tensor<16x256xf32>
      %48 = "stablehlo.select"(%19, %45, %47) : (tensor<16x256xi1>, tensor<16x256xf32>, tensor<16x256xf32>) -> tensor<16x256xf32>
      %49 = "stablehlo.constant"() <{value = dense<0.000000e+00> : tensor<f32>}> : () -> tensor<f32>
      %50 = "stablehlo.reduce"(%48, %49) <{dimensions = array<i64: 0>}> ({
      ^bb0(%arg37: tensor<f32>, %arg38: tensor<f32>):
        %128 = "stablehlo.add"(%arg37, %arg38) : (tensor<f32>, tensor<f32>) -> tensor<f32>
        "stablehlo.return"(%128) : (tensor<f32>) -> ()
      }) : (tensor<16x256xf32>, tensor<f32>) -> tensor<256xf32>
      %51 = "stablehlo.reshape"(%50) : (tensor<256xf32>) -> tensor<1x256xf32>
      %52 = "stablehlo.constant"() <{value = dense<0.000000e+00> : tensor<f32>}> : () -> tensor<f32>
      %53 = "stablehlo.reduce"(%51, %52) <{dimensions = array<i64: 0>}> ({
      ^bb0(%arg35: tensor<f32>, %arg36: tensor<f32>):
        %127 = "stablehlo.add"(%arg35, %arg36) : (tensor<f32>, tensor<f32>) -> tensor<f32>
        "stablehlo.return"(%127) : (tensor<f32>) -> ()
      }) : (tensor<1x256xf32>, tensor<f32>) -> tensor<256xf32>
      %54 = "stablehlo.dot_general"(%48, %8) <{dot_dimension_numbers = #stablehlo.dot<lhs_contracting_dimensions = [0], rhs_contracting_dimensions = [0]>, precision_config = [#stablehlo<precision DEFAULT>, #stablehlo<precision DEFAULT>]}> : (tensor<16x256xf32>, tensor<16x256xf32>) -> tensor<256x256xf32>
      %55 = "stablehlo.transpose"(%54) <{permutation = array<i64: 1, 0>}> : (tensor<256x256xf32>) -> tensor<256x256xf32>
      %56 = "stablehlo.dot_general"(%48, %arg13) <{dot_dimension_numbers = #stablehlo.dot<lhs_contracting_dimensions = [1], rhs_contracting_dimensions = [1]>, precision_config = [#stablehlo<precision DEFAULT>, #stablehlo<precision DEFAULT>]}> : (tensor<16x256xf32>, tensor<256x256xf32>) -> tensor<16x256xf32>
      %57 = "stablehlo.constant"() <{value = dense<0.000000e+00> : tensor<f32>}> : () -> tensor<f32>
      %58 = "stablehlo.broadcast_in_dim"(%57) <{broadcast_dimensions = array<i64>}> : (tensor<f32>) -> tensor<16x256xf32>
      %59 = "stablehlo.select"(%11, %56, %58) : (tensor<16x256xi1>, tensor<16x256xf32>, tensor<16x256xf32>) -> tensor<16x256xf32>
      %60 = "stablehlo.constant"() <{value = dense<0.000000e+00> : tensor<f32>}> : () -> tensor<f32>
      %61 = "stablehlo.reduce"(%59, %60) <{dimensions = array<i64: 0>}> ({
      ^bb0(%arg33: tensor<f32>, %arg34: tensor<f32>):
        %126 = "stablehlo.add"(%arg33, %arg34) : (tensor<f32>, tensor<f32>) -> tensor<f32>
        "stablehlo.return"(%126) : (tensor<f32>) -> ()
      }) : (tensor<16x256xf32>, tensor<f32>) -> tensor<256xf32>
      %62 = "stablehlo.reshape"(%61) : (tensor<256xf32>) -> tensor<1x256xf32>
      %63 = "stablehlo.constant"() <{value = dense<0.000000e+00> : tensor<f32>}> : () -> tensor<f32>
      %64 = "stablehlo.reduce"(%62, %63) <{dimensions = array<i64: 0>}> ({
      ^bb0(%arg31: tensor<f32>, %arg32: tensor<f32>):
        %125 = "stablehlo.add"(%arg31, %arg32) : (tensor<f32>, tensor<f32>) -> tensor<f32>
        "stablehlo.return"(%125) : (tensor<f32>) -> ()
      }) : (tensor<1x256xf32>, tensor<f32>) -> tensor<256xf32>
      %65 = "stablehlo.dot_general"(%59, %arg15) <{dot_dimension_numbers = #stablehlo.dot<lhs_contracting_dimensions = [0], rhs_contracting_dimensions = [0]>, precision_config = [#stablehlo<precision DEFAULT>, #stablehlo<precision DEFAULT>]}> : (tensor<16x256xf32>, tensor<16x64xf32>) -> tensor<256x64xf32>
      %66 = "stablehlo.transpose"(%65) <{permutation = array<i64: 1, 0>}> : (tensor<256x64xf32>) -> tensor<64x256xf32>
      %67 = "stablehlo.all_reduce"(%64) <{channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>, replica_groups = dense<[[0, 1, 2, 3]]> : tensor<1x4xi64>, use_global_device_ids}> ({
      ^bb0(%arg29: tensor<f32>, %arg30: tensor<f32>):
        %124 = "stablehlo.add"(%arg29, %arg30) : (tensor<f32>, tensor<f32>) -> tensor<f32>
        "stablehlo.return"(%124) : (tensor<f32>) -> ()
      }) : (tensor<256xf32>) -> tensor<256xf32>
      %68 = "stablehlo.constant"() <{value = dense<4.000000e+00> : tensor<f32>}> : () -> tensor<f32>
      %69 = "stablehlo.broadcast_in_dim"(%68) <{broadcast_dimensions = array<i64>}> : (tensor<f32>) -> tensor<256xf32>
      %70 = "stablehlo.divide"(%67, %69) : (tensor<256xf32>, tensor<256xf32>) -> tensor<256xf32>
      %71 = "stablehlo.all_reduce"(%53) <{channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>, replica_groups = dense<[[0, 1, 2, 3]]> : tensor<1x4xi64>, use_global_device_ids}> ({
      ^bb0(%arg27: tensor<f32>, %arg28: tensor<f32>):
        %123 = "stablehlo.add"(%arg27, %arg28) : (tensor<f32>, tensor<f32>) -> tensor<f32>
        "stablehlo.return"(%123) : (tensor<f32>) -> ()
      }) : (tensor<256xf32>) -> tensor<256xf32>
      %72 = "stablehlo.constant"() <{value = dense<4.000000e+00> : tensor<f32>}> : () -> tensor<f32>
      %73 = "stablehlo.broadcast_in_dim"(%72) <{broadcast_dimensions = array<i64>}> : (tensor<f32>) -> tensor<256xf32>
      %74 = "stablehlo.divide"(%71, %73) : (tensor<256xf32>, tensor<256xf32>) -> tensor<256xf32>
      %75 = "stablehlo.all_reduce"(%42) <{channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>, replica_groups = dense<[[0, 1, 2, 3]]> : tensor<1x4xi64>, use_global_device_ids}> ({
      ^bb0(%arg25: tensor<f32>, %arg26: tensor<f32>):
        %122 = "stablehlo.add"(%arg25, %arg26) : (tensor<f32>, tensor<f32>) -> tensor<f32>
        "stablehlo.return"(%122) : (tensor<f32>) -> ()
      }) : (tensor<64xf32>) -> tensor<64xf32>
      %76 = "stablehlo.constant"() <{value = dense<4.000000e+00> : tensor<f32>}> : () -> tensor<f32>
      %77 = "stablehlo.broadcast_in_dim"(%76) <{broadcast_dimensions = array<i64>}> : (tensor<f32>) -> tensor<64xf32>
      %78 = "stablehlo.divide"(%75, %77) : (tensor<64xf32>, tensor<64xf32>) -> tensor<64xf32>
      %79 = "stablehlo.all_reduce"(%66) <{channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>, replica_groups = dense<[[0, 1, 2, 3]]> : tensor<1x4xi64>, use_global_device_ids}> ({
      ^bb0(%arg23: tensor<f32>, %arg24: tensor<f32>):
        %121 = "stablehlo.add"(%arg23, %arg24) : (tensor<f32>, tensor<f32>) -> tensor<f32>
        "stablehlo.return"(%121) : (tensor<f32>) -> ()
      }) : (tensor<64x256xf32>) -> tensor<64x256xf32>
      %80 = "stablehlo.constant"() <{value = dense<4.000000e+00> : tensor<f32>}> : () -> tensor<f32>
      %81 = "stablehlo.broadcast_in_dim"(%80) <{broadcast_dimensions = array<i64>}> : (tensor<f32>) -> tensor<64x256xf32>
      %82 = "stablehlo.divide"(%79, %81) : (tensor<64x256xf32>, tensor<64x256xf32>) -> tensor<64x256xf32>
      %83 = "stablehlo.all_reduce"(%55) <{channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>, replica_groups = dense<[[0, 1, 2, 3]]> : tensor<1x4xi64>, use_global_device_ids}> ({
      ^bb0(%arg21: tensor<f32>, %arg22: tensor<f32>):
        %120 = "stablehlo.add"(%arg21, %arg22) : (tensor<f32>, tensor<f32>) -> tensor<f32>
        "stablehlo.return"(%120) : (tensor<f32>) -> ()
      }) : (tensor<256x256xf32>) -> tensor<256x256xf32>
      %84 = "stablehlo.constant"() <{value = dense<4.000000e+00> : tensor<f32>}> : () -> tensor<f32>
      %85 = "stablehlo.broadcast_in_dim"(%84) <{broadcast_dimensions = array<i64>}> : (tensor<f32>) -> tensor<256x256xf32>
      %86 = "stablehlo.divide"(%83, %85) : (tensor<256x256xf32>, tensor<256x256xf32>) -> tensor<256x256xf32>
      %87 = "stablehlo.all_reduce"(%44) <{channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>, replica_groups = dense<[[0, 1, 2, 3]]> : tensor<1x4xi64>, use_global_device_ids}> ({
      ^bb0(%arg19: tensor<f32>, %arg20: tensor<f32>):
        %119 = "stablehlo.add"(%arg19, %arg20) : (tensor<f32>, tensor<f32>) -> tensor<f32>
        "stablehlo.return"(%119) : (tensor<f32>) -> ()
      }) : (tensor<256x64xf32>) -> tensor<256x64xf32>
      %88 = "stablehlo.constant"() <{value = dense<4.000000e+00> : tensor<f32>}> : () -> tensor<f32>
      %89 = "stablehlo.broadcast_in_dim"(%88) <{broadcast_dimensions = array<i64>}> : (tensor<f32>) -> tensor<256x64xf32>
      %90 = "stablehlo.divide"(%87, %89) : (tensor<256x64xf32>, tensor<256x64xf32>) -> tensor<256x64xf32>
      %91 = "stablehlo.constant"() <{value = dense<1.000000e-01> : tensor<f32>}> : () -> tensor<f32>
      %92 = "stablehlo.broadcast_in_dim"(%91) <{broadcast_dimensions = array<i64>}> : (tensor<f32>) -> tensor<256xf32>
      %93 = "stablehlo.multiply"(%92, %70) : (tensor<256xf32>, tensor<256xf32>) -> tensor<256xf32>
      %94 = "stablehlo.subtract"(%arg9, %93) : (tensor<256xf32>, tensor<256xf32>) -> tensor<256xf32>
      %95 = "stablehlo.constant"() <{value = dense<1.000000e-01> : tensor<f32>}> : () -> tensor<f32>
      %96 = "stablehlo.broadcast_in_dim"(%95) <{broadcast_dimensions = array<i64>}> : (tensor<f32>) -> tensor<256xf32>
      %97 = "stablehlo.multiply"(%96, %74) : (tensor<256xf32>, tensor<256xf32>) -> tensor<256xf32>
      %98 = "stablehlo.subtract"(%arg10, %97) : (tensor<256xf32>, tensor<256xf32>) -> tensor<256xf32>
      %99 = "stablehlo.constant"() <{value = dense<1.000000e-01> : tensor<f32>}> : () -> tensor<f32>
      %100 = "stablehlo.broadcast_in_dim"(%99) <{broadcast_dimensions = array<i64>}> : (tensor<f32>) -> tensor<64xf32>
      %101 = "stablehlo.multiply"(%100, %78) : (tensor<64xf32>, tensor<64xf32>) -> tensor<64xf32>
      %102 = "stablehlo.subtract"(%arg11, %101) : (tensor<64xf32>, tensor<64xf32>) -> tensor<64xf32>
      %103 = "stablehlo.constant"() <{value = dense<1.000000e-01> : tensor<f32>}> : () -> tensor<f32>
      %104 = "stablehlo.broadcast_in_dim"(%103) <{broadcast_dimensions = array<i64>}> : (tensor<f32>) -> tensor<64x256xf32>
      %105 = "stablehlo.multiply"(%104, %82) : (tensor<64x256xf32>, tensor<64x256xf32>) -> tensor<64x256xf32>
      %106 = "stablehlo.subtract"(%arg12, %105) : (tensor<64x256xf32>, tensor<64x256xf32>) -> tensor<64x256xf32>
      %107 = "stablehlo.constant"() <{value = dense<1.000000e-01> : tensor<f32>}> : () -> tensor<f32>
      %108 = "stablehlo.broadcast_in_dim"(%107) <{broadcast_dimensions = array<i64>}> : (tensor<f32>) -> tensor<256x256xf32>
      %109 = "stablehlo.multiply"(%108, %86) : (tensor<256x256xf32>, tensor<256x256xf32>) -> tensor<256x256xf32>
      %110 = "stablehlo.subtract"(%arg13, %109) : (tensor<256x256xf32>, tensor<256x256xf32>) -> tensor<256x256xf32>
      %111 = "stablehlo.constant"() <{value = dense<1.000000e-01> : tensor<f32>}> : () -> tensor<f32>
      %112 = "stablehlo.broadcast_in_dim"(%111) <{broadcast_dimensions = array<i64>}> : (tensor<f32>) -> tensor<256x64xf32>
      %113 = "stablehlo.multiply"(%112, %90) : (tensor<256x64xf32>, tensor<256x64xf32>) -> tensor<256x64xf32>
      %114 = "stablehlo.subtract"(%arg14, %113) : (tensor<256x64xf32>, tensor<256x64xf32>) -> tensor<256x64xf32>
      %115 = "stablehlo.all_reduce"(%32) <{channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>, replica_groups = dense<[[0, 1, 2, 3]]> : tensor<1x4xi64>, use_global_device_ids}> ({
      ^bb0(%arg17: tensor<f32>, %arg18: tensor<f32>):
        %118 = "stablehlo.add"(%arg17, %arg18) : (tensor<f32>, tensor<f32>) -> tensor<f32>
        "stablehlo.return"(%118) : (tensor<f32>) -> ()
      }) : (tensor<f32>) -> tensor<f32>
      %116 = "stablehlo.constant"() <{value = dense<4.000000e+00> : tensor<f32>}> : () -> tensor<f32>
      %117 = "stablehlo.divide"(%115, %116) : (tensor<f32>, tensor<f32>) -> tensor<f32>
      "sdy.return"(%94, %98, %102, %106, %110, %114, %117) : (tensor<256xf32>, tensor<256xf32>, tensor<64xf32>, tensor<64x256xf32>, tensor<256x256xf32>, tensor<256x64xf32>, tensor<f32>) -> ()
    }) : (tensor<256xf32>, tensor<256xf32>, tensor<64xf32>, tensor<64x256xf32>, tensor<256x256xf32>, tensor<256x64xf32>, tensor<64x64xf32>, tensor<64x64xf32>) -> (tensor<256xf32>, tensor<256xf32>, tensor<64xf32>, tensor<64x256xf32>, tensor<256x256xf32>, tensor<256x64xf32>, tensor<f32>)
    "func.return"(%3#0, %3#1, %3#2, %3#3, %3#4, %3#5, %3#6) : (tensor<256xf32>, tensor<256xf32>, tensor<64xf32>, tensor<64x256xf32>, tensor<256x256xf32>, tensor<256x64xf32>, tensor<f32>) -> ()
  }) : () -> ()
  "func.func"() <{arg_attrs = [{}], function_type = (tensor<16x256xf32>) -> tensor<16x256xf32>, res_attrs = [{}], sym_name = "relu", sym_visibility = "private"}> ({
  ^bb0(%arg0: tensor<16x256xf32>):
    %0 = "stablehlo.constant"() <{value = dense<0.000000e+00> : tensor<f32>}> : () -> tensor<f32>
    %1 = "stablehlo.broadcast_in_dim"(%0) <{broadcast_dimensions = array<i64>}> : (tensor<f32>) -> tensor<16x256xf32>
    %2 = "stablehlo.maximum"(%arg0, %1) : (tensor<16x256xf32>, tensor<16x256xf32>) -> tensor<16x256xf32>
    "func.return"(%2) : (tensor<16x256xf32>) -> ()
  }) : () -> ()
}) {mhlo.num_partitions = 4 : i32, mhlo.num_replicas = 1 : i32} : () -> ()
