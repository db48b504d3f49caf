// RUN: lancet-model gpt2-moe --layers 2 --hidden 8 --heads 2 --seq 4 --batch 2 --world-size 2 --experts-per-rank 2 --vocab 11 | filecheck %s
// RUN: lancet-model gpt2-moe --layers 2 --hidden 8 --heads 2 --seq 4 --batch 2 --world-size 2 --experts-per-rank 2 --vocab 11 --gate top2 --optimizer sgd --dtype bf16 | filecheck %s --check-prefix=TOP2
// RUN: lancet-model gpt2-moe --layers 2 --hidden 8 --heads 2 --seq 4 --batch 2 --world-size 2 --experts-per-rank 2 --vocab 11 | lancet-opt -p 'tutel-pipeline{degree=2}' | filecheck %s --check-prefix=TUTEL
// RUN: lancet-model list | filecheck %s --check-prefix=LIST

// Two layers (layer 0 dense, layer 1 MoE), hidden 8, 2 heads, 2 sequences of 4 tokens
// (T = 8), 2 ranks x 2 experts (E = 4): switch capacity ceil(8 / 4) = 2; top2 doubles it.

// CHECK:       builtin.module attributes {lancet.world_size = 2 : i64}
// CHECK-NEXT:  func.func @train_step(%ids: tensor<2x4xi64> {lancet.max_int = 11 : i64, lancet.name = "ids"}, %labels: tensor<8xi64> {lancet.max_int = 11 : i64, lancet.name = "labels"}, %wte: tensor<11x8xf32> {lancet.name = "wte", lancet.init_scale = 2.000000e-02 : f64, lancet.replicated}
// CHECK-SAME:    %l0_ln1_g: tensor<8xf32> {lancet.name = "l0_ln1_g", lancet.init_scale = 0.000000e+00 : f64, lancet.init_offset = 1.000000e+00 : f64, lancet.replicated}
// CHECK-SAME:    %l1_we1: tensor<2x8x32xf32> {lancet.name = "l1_we1", lancet.init_scale = 2.000000e-02 : f64},
// CHECK:       %tok_emb = comp.embedding %wte, %ids {lancet.role = "fwd"}
// CHECK:       %l0_scores = comp.batch_matmul %l0_qh, %l0_kh {transpose_b = true, lancet.role = "fwd"} : (tensor<4x4x4xf32>, tensor<4x4x4xf32>) -> tensor<4x4x4xf32>
// CHECK:       %l0_probs = comp.softmax %{{.*}} {causal = true, lancet.role = "fwd"}
// CHECK:       %l1_combine, %l1_dispatch = comp.moe_gate %l1_gate_logits {capacity = 2 : i64, lancet.role = "fwd"} : (tensor<8x4xf32>) -> (tensor<8x4x2xf32>, tensor<8x4x2xf32>)
// CHECK-NEXT:  %l1_dispatched = comp.moe_dispatch %l1_ln2, %l1_dispatch {lancet.role = "fwd"} : (tensor<8x8xf32>, tensor<8x4x2xf32>) -> tensor<4x2x8xf32>
// CHECK-NEXT:  %l1_expert_in = comm.all_to_all %l1_dispatched concat 1 {lancet.role = "fwd"} : (tensor<4x2x8xf32>) -> tensor<2x4x8xf32>
// CHECK-NEXT:  %l1_expert_h = comp.batch_matmul %l1_expert_in, %l1_we1 {lancet.role = "fwd"} : (tensor<2x4x8xf32>, tensor<2x8x32xf32>) -> tensor<2x4x32xf32>
// CHECK-NEXT:  %l1_expert_act = comp.gelu %l1_expert_h
// CHECK-NEXT:  %l1_expert_out = comp.batch_matmul %l1_expert_act, %l1_we2
// CHECK-NEXT:  %l1_returned = comm.all_to_all %l1_expert_out split 1 {lancet.role = "fwd"} : (tensor<2x4x8xf32>) -> tensor<4x2x8xf32>
// CHECK-NEXT:  %l1_moe_out = comp.moe_combine %l1_returned, %l1_combine
// CHECK:       %loss = comp.cross_entropy %logits, %labels {lancet.role = "fwd"} : (tensor<8x11xf32>, tensor<8xi64>) -> tensor<f32>
// CHECK:       %l1_d_expert_out = comm.all_to_all %l1_d_returned concat 1 {lancet.role = "dx"}
// CHECK:       %l1_we2_gscaled = comp.scale %{{.*}} {alpha = 5.000000e-01 : f64, lancet.role = "dw"}
// CHECK:       %l1_d_dispatched = comm.all_to_all %l1_d_expert_in split 1 {lancet.role = "dx"}
// CHECK:       %l1_wg_gavg = comm.allreduce %{{.*}} reduce avg {lancet.role = "dw"} : (tensor<8x4xf32>) -> tensor<8x4xf32>
// CHECK:       %wte_gavg = comm.allreduce %dwte reduce avg {lancet.role = "dw"}
// CHECK-NEXT:  %wte_new, %m_wte_new, %v_wte_new = comp.adam_update %wte, %wte_gavg, %m_wte, %v_wte {lancet.role = "update"}
// CHECK:       %l1_we1_new, %m_l1_we1_new, %v_l1_we1_new = comp.adam_update %l1_we1, %l1_we1_gscaled, %m_l1_we1, %v_l1_we1
// CHECK:       func.return %loss, %wte_new, %wpe_new,

// TOP2:        %l1_combine, %l1_dispatch = comp.moe_gate %l1_gate_logits {gate = "top2", capacity = 4 : i64, lancet.role = "fwd"} : (tensor<8x4xbf16>) -> (tensor<8x4x4xbf16>, tensor<8x4x4xbf16>)
// TOP2:        %loss = comp.cross_entropy %logits, %labels {lancet.role = "fwd"} : (tensor<8x11xbf16>, tensor<8xi64>) -> tensor<f32>
// TOP2:        %wte_new = comp.sgd_update %wte, %wte_gavg {lancet.role = "update"}
// TOP2-NOT:    adam_update

// TUTEL:       %{{.*}}, %{{.*}} = comp.split %l1_dispatched {axis = 1 : i64, num = 2 : i64, lancet.role = "fwd"{{(, lancet.origin = .*)?}}} : (tensor<4x2x8xf32>) -> (tensor<4x1x8xf32>, tensor<4x1x8xf32>)
// TUTEL:       %l1_returned = comp.concat %l1_returned_part0, %l1_returned_part1 {axis = 1 : i64, lancet.role = "fwd"{{(, lancet.origin = .*)?}}}
// TUTEL:       %l1_d_dispatched = comp.concat %l1_d_dispatched_part0, %l1_d_dispatched_part1 {axis = 1 : i64, lancet.role = "dx"{{(, lancet.origin = .*)?}}}

// LIST:        gpt2_moe_nl12_m768_nh16_sl512_b48   layers=12 hidden=768 heads=16 seq=512 batch=48 world_size=16 experts=32 (2/rank) gate=switch capacity=768 moe_layers=6 params/rank=152482560
// LIST:        gpt2_moe_nl24_m1024_nh16_sl512_b8  layers=24 hidden=1024 heads=16 seq=512 batch=8 world_size=16 experts=32 (2/rank) gate=switch capacity=128 moe_layers=12
