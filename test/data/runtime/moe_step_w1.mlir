// Small MoE training step (world 1, 2 expert(s) per rank, f32); written by test/data/runtime/make_modules.py.
builtin.module attributes {lancet.world_size = 1 : i64} {
  func.func @train_step(%x: tensor<8x4xf32>, %labels: tensor<8xi64> {lancet.max_int = 4 : i64}, %w1: tensor<4x8xf32> {lancet.init_scale = 0.5 : f64}, %b1: tensor<8xf32> {lancet.init_scale = 0.1 : f64}, %w2: tensor<8x4xf32> {lancet.init_scale = 0.5 : f64}, %gamma: tensor<4xf32>, %beta: tensor<4xf32> {lancet.init_scale = 0.1 : f64}, %wg: tensor<4x2xf32> {lancet.init_scale = 0.5 : f64}, %we: tensor<2x4x4xf32> {lancet.init_scale = 0.5 : f64}) -> (tensor<f32>, tensor<8x4xf32>, tensor<4x8xf32>, tensor<8xf32>, tensor<8x4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4x2xf32>, tensor<2x4x4xf32>) {
    %h1 = comp.matmul %x, %w1 : (tensor<8x4xf32>, tensor<4x8xf32>) -> tensor<8x8xf32>
    %h1b = comp.bias_add %h1, %b1 : (tensor<8x8xf32>, tensor<8xf32>) -> tensor<8x8xf32>
    %a1 = comp.gelu %h1b : (tensor<8x8xf32>) -> tensor<8x8xf32>
    %h2 = comp.matmul %a1, %w2 : (tensor<8x8xf32>, tensor<8x4xf32>) -> tensor<8x4xf32>
    %r = comp.add %h2, %x : (tensor<8x4xf32>, tensor<8x4xf32>) -> tensor<8x4xf32>
    %n = comp.layer_norm %r, %gamma, %beta : (tensor<8x4xf32>, tensor<4xf32>, tensor<4xf32>) -> tensor<8x4xf32>
    %logits = comp.matmul %n, %wg : (tensor<8x4xf32>, tensor<4x2xf32>) -> tensor<8x2xf32>
    %comb, %disp = comp.moe_gate %logits {capacity = 4 : i64} : (tensor<8x2xf32>) -> (tensor<8x2x4xf32>, tensor<8x2x4xf32>)
    %ein = comp.moe_dispatch %n, %disp : (tensor<8x4xf32>, tensor<8x2x4xf32>) -> tensor<2x4x4xf32>
    %a = comm.all_to_all %ein split 0 concat 1 : (tensor<2x4x4xf32>) -> tensor<2x4x4xf32>
    %he = comp.batch_matmul %a, %we : (tensor<2x4x4xf32>, tensor<2x4x4xf32>) -> tensor<2x4x4xf32>
    %b = comm.all_to_all %he split 1 concat 0 : (tensor<2x4x4xf32>) -> tensor<2x4x4xf32>
    %y = comp.moe_combine %b, %comb : (tensor<2x4x4xf32>, tensor<8x2x4xf32>) -> tensor<8x4xf32>
    %o = comp.add %y, %n : (tensor<8x4xf32>, tensor<8x4xf32>) -> tensor<8x4xf32>
    %loss = comp.cross_entropy %o, %labels : (tensor<8x4xf32>, tensor<8xi64>) -> tensor<f32>
    %do = comp.cross_entropy_dx %o, %labels : (tensor<8x4xf32>, tensor<8xi64>) -> tensor<8x4xf32>
    %db = comp.moe_combine_dx %do, %comb : (tensor<8x4xf32>, tensor<8x2x4xf32>) -> tensor<2x4x4xf32>
    %dcomb = comp.moe_combine_dw %do, %b : (tensor<8x4xf32>, tensor<2x4x4xf32>) -> tensor<8x2x4xf32>
    %dhe = comm.all_to_all %db split 0 concat 1 : (tensor<2x4x4xf32>) -> tensor<2x4x4xf32>
    %da = comp.batch_matmul_dx %dhe, %we : (tensor<2x4x4xf32>, tensor<2x4x4xf32>) -> tensor<2x4x4xf32>
    %dwe = comp.batch_matmul_dw %a, %dhe : (tensor<2x4x4xf32>, tensor<2x4x4xf32>) -> tensor<2x4x4xf32>
    %dein = comm.all_to_all %da split 1 concat 0 : (tensor<2x4x4xf32>) -> tensor<2x4x4xf32>
    %dn1 = comp.moe_dispatch_dx %dein, %disp : (tensor<2x4x4xf32>, tensor<8x2x4xf32>) -> tensor<8x4xf32>
    %dlogits = comp.moe_gate_dx %dcomb, %logits {capacity = 4 : i64} : (tensor<8x2x4xf32>, tensor<8x2xf32>) -> tensor<8x2xf32>
    %dn2 = comp.matmul_dx %dlogits, %wg : (tensor<8x2xf32>, tensor<4x2xf32>) -> tensor<8x4xf32>
    %dwg = comp.matmul_dw %n, %dlogits : (tensor<8x4xf32>, tensor<8x2xf32>) -> tensor<4x2xf32>
    %dn_a = comp.add %dn1, %dn2 : (tensor<8x4xf32>, tensor<8x4xf32>) -> tensor<8x4xf32>
    %dn = comp.add %dn_a, %do : (tensor<8x4xf32>, tensor<8x4xf32>) -> tensor<8x4xf32>
    %dr = comp.layer_norm_dx %dn, %r, %gamma : (tensor<8x4xf32>, tensor<8x4xf32>, tensor<4xf32>) -> tensor<8x4xf32>
    %dgamma, %dbeta = comp.layer_norm_dw %dn, %r : (tensor<8x4xf32>, tensor<8x4xf32>) -> (tensor<4xf32>, tensor<4xf32>)
    %da1 = comp.matmul_dx %dr, %w2 : (tensor<8x4xf32>, tensor<8x4xf32>) -> tensor<8x8xf32>
    %dw2 = comp.matmul_dw %a1, %dr : (tensor<8x8xf32>, tensor<8x4xf32>) -> tensor<8x4xf32>
    %dh1b = comp.gelu_dx %da1, %h1b : (tensor<8x8xf32>, tensor<8x8xf32>) -> tensor<8x8xf32>
    %db1 = comp.reduce_sum %dh1b {axes = array<i64: 0>} : (tensor<8x8xf32>) -> tensor<8xf32>
    %dw1 = comp.matmul_dw %x, %dh1b : (tensor<8x4xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
    %dx1 = comp.matmul_dx %dh1b, %w1 : (tensor<8x8xf32>, tensor<4x8xf32>) -> tensor<8x4xf32>
    %dx = comp.add %dx1, %dr : (tensor<8x4xf32>, tensor<8x4xf32>) -> tensor<8x4xf32>
    %sdwg = comm.allreduce %dwg : (tensor<4x2xf32>) -> tensor<4x2xf32>
    %sdgamma = comm.allreduce %dgamma : (tensor<4xf32>) -> tensor<4xf32>
    %sdbeta = comm.allreduce %dbeta : (tensor<4xf32>) -> tensor<4xf32>
    %sdw2 = comm.allreduce %dw2 : (tensor<8x4xf32>) -> tensor<8x4xf32>
    %sdb1 = comm.allreduce %db1 : (tensor<8xf32>) -> tensor<8xf32>
    %sdw1 = comm.allreduce %dw1 : (tensor<4x8xf32>) -> tensor<4x8xf32>
    %new_w1 = comp.sgd_update %w1, %sdw1 {lr = 1.000000e-01 : f64} : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
    %new_b1 = comp.sgd_update %b1, %sdb1 {lr = 1.000000e-01 : f64} : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
    %new_w2 = comp.sgd_update %w2, %sdw2 {lr = 1.000000e-01 : f64} : (tensor<8x4xf32>, tensor<8x4xf32>) -> tensor<8x4xf32>
    %new_gamma = comp.sgd_update %gamma, %sdgamma {lr = 1.000000e-01 : f64} : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %new_beta = comp.sgd_update %beta, %sdbeta {lr = 1.000000e-01 : f64} : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %new_wg = comp.sgd_update %wg, %sdwg {lr = 1.000000e-01 : f64} : (tensor<4x2xf32>, tensor<4x2xf32>) -> tensor<4x2xf32>
    %new_we = comp.sgd_update %we, %dwe {lr = 1.000000e-01 : f64} : (tensor<2x4x4xf32>, tensor<2x4x4xf32>) -> tensor<2x4x4xf32>
    func.return %loss, %dx, %new_w1, %new_b1, %new_w2, %new_gamma, %new_beta, %new_wg, %new_we : tensor<f32>, tensor<8x4xf32>, tensor<4x8xf32>, tensor<8xf32>, tensor<8x4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4x2xf32>, tensor<2x4x4xf32>
  }
}
