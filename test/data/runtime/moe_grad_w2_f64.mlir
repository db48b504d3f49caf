// Small MoE training step (world 2, 1 expert(s) per rank, f64); written by test/data/runtime/make_modules.py.
builtin.module attributes {lancet.world_size = 2 : i64} {
  func.func @train_step(%x: tensor<8x4xf64>, %labels: tensor<8xi64> {lancet.max_int = 4 : i64}, %w1: tensor<4x8xf64> {lancet.init_scale = 0.5 : f64}, %b1: tensor<8xf64> {lancet.init_scale = 0.1 : f64}, %w2: tensor<8x4xf64> {lancet.init_scale = 0.5 : f64}, %gamma: tensor<4xf64>, %beta: tensor<4xf64> {lancet.init_scale = 0.1 : f64}, %wg: tensor<4x2xf64> {lancet.init_scale = 0.5 : f64}, %we: tensor<1x4x4xf64> {lancet.init_scale = 0.5 : f64}) -> (tensor<f64>, tensor<8x4xf64>, tensor<4x8xf64>, tensor<8xf64>, tensor<8x4xf64>, tensor<4xf64>, tensor<4xf64>, tensor<4x2xf64>, tensor<1x4x4xf64>) {
    %h1 = comp.matmul %x, %w1 : (tensor<8x4xf64>, tensor<4x8xf64>) -> tensor<8x8xf64>
    %h1b = comp.bias_add %h1, %b1 : (tensor<8x8xf64>, tensor<8xf64>) -> tensor<8x8xf64>
    %a1 = comp.gelu %h1b : (tensor<8x8xf64>) -> tensor<8x8xf64>
    %h2 = comp.matmul %a1, %w2 : (tensor<8x8xf64>, tensor<8x4xf64>) -> tensor<8x4xf64>
    %r = comp.add %h2, %x : (tensor<8x4xf64>, tensor<8x4xf64>) -> tensor<8x4xf64>
    %n = comp.layer_norm %r, %gamma, %beta : (tensor<8x4xf64>, tensor<4xf64>, tensor<4xf64>) -> tensor<8x4xf64>
    %logits = comp.matmul %n, %wg : (tensor<8x4xf64>, tensor<4x2xf64>) -> tensor<8x2xf64>
    %comb, %disp = comp.moe_gate %logits {capacity = 4 : i64} : (tensor<8x2xf64>) -> (tensor<8x2x4xf64>, tensor<8x2x4xf64>)
    %ein = comp.moe_dispatch %n, %disp : (tensor<8x4xf64>, tensor<8x2x4xf64>) -> tensor<2x4x4xf64>
    %a = comm.all_to_all %ein split 0 concat 1 : (tensor<2x4x4xf64>) -> tensor<1x8x4xf64>
    %he = comp.batch_matmul %a, %we : (tensor<1x8x4xf64>, tensor<1x4x4xf64>) -> tensor<1x8x4xf64>
    %b = comm.all_to_all %he split 1 concat 0 : (tensor<1x8x4xf64>) -> tensor<2x4x4xf64>
    %y = comp.moe_combine %b, %comb : (tensor<2x4x4xf64>, tensor<8x2x4xf64>) -> tensor<8x4xf64>
    %o = comp.add %y, %n : (tensor<8x4xf64>, tensor<8x4xf64>) -> tensor<8x4xf64>
    %loss = comp.cross_entropy %o, %labels : (tensor<8x4xf64>, tensor<8xi64>) -> tensor<f64>
    %do = comp.cross_entropy_dx %o, %labels : (tensor<8x4xf64>, tensor<8xi64>) -> tensor<8x4xf64>
    %db = comp.moe_combine_dx %do, %comb : (tensor<8x4xf64>, tensor<8x2x4xf64>) -> tensor<2x4x4xf64>
    %dcomb = comp.moe_combine_dw %do, %b : (tensor<8x4xf64>, tensor<2x4x4xf64>) -> tensor<8x2x4xf64>
    %dhe = comm.all_to_all %db split 0 concat 1 : (tensor<2x4x4xf64>) -> tensor<1x8x4xf64>
    %da = comp.batch_matmul_dx %dhe, %we : (tensor<1x8x4xf64>, tensor<1x4x4xf64>) -> tensor<1x8x4xf64>
    %dwe = comp.batch_matmul_dw %a, %dhe : (tensor<1x8x4xf64>, tensor<1x8x4xf64>) -> tensor<1x4x4xf64>
    %dein = comm.all_to_all %da split 1 concat 0 : (tensor<1x8x4xf64>) -> tensor<2x4x4xf64>
    %dn1 = comp.moe_dispatch_dx %dein, %disp : (tensor<2x4x4xf64>, tensor<8x2x4xf64>) -> tensor<8x4xf64>
    %dlogits = comp.moe_gate_dx %dcomb, %logits {capacity = 4 : i64} : (tensor<8x2x4xf64>, tensor<8x2xf64>) -> tensor<8x2xf64>
    %dn2 = comp.matmul_dx %dlogits, %wg : (tensor<8x2xf64>, tensor<4x2xf64>) -> tensor<8x4xf64>
    %dwg = comp.matmul_dw %n, %dlogits : (tensor<8x4xf64>, tensor<8x2xf64>) -> tensor<4x2xf64>
    %dn_a = comp.add %dn1, %dn2 : (tensor<8x4xf64>, tensor<8x4xf64>) -> tensor<8x4xf64>
    %dn = comp.add %dn_a, %do : (tensor<8x4xf64>, tensor<8x4xf64>) -> tensor<8x4xf64>
    %dr = comp.layer_norm_dx %dn, %r, %gamma : (tensor<8x4xf64>, tensor<8x4xf64>, tensor<4xf64>) -> tensor<8x4xf64>
    %dgamma, %dbeta = comp.layer_norm_dw %dn, %r : (tensor<8x4xf64>, tensor<8x4xf64>) -> (tensor<4xf64>, tensor<4xf64>)
    %da1 = comp.matmul_dx %dr, %w2 : (tensor<8x4xf64>, tensor<8x4xf64>) -> tensor<8x8xf64>
    %dw2 = comp.matmul_dw %a1, %dr : (tensor<8x8xf64>, tensor<8x4xf64>) -> tensor<8x4xf64>
    %dh1b = comp.gelu_dx %da1, %h1b : (tensor<8x8xf64>, tensor<8x8xf64>) -> tensor<8x8xf64>
    %db1 = comp.reduce_sum %dh1b {axes = array<i64: 0>} : (tensor<8x8xf64>) -> tensor<8xf64>
    %dw1 = comp.matmul_dw %x, %dh1b : (tensor<8x4xf64>, tensor<8x8xf64>) -> tensor<4x8xf64>
    %dx1 = comp.matmul_dx %dh1b, %w1 : (tensor<8x8xf64>, tensor<4x8xf64>) -> tensor<8x4xf64>
    %dx = comp.add %dx1, %dr : (tensor<8x4xf64>, tensor<8x4xf64>) -> tensor<8x4xf64>
    %sdwg = comm.allreduce %dwg : (tensor<4x2xf64>) -> tensor<4x2xf64>
    %sdgamma = comm.allreduce %dgamma : (tensor<4xf64>) -> tensor<4xf64>
    %sdbeta = comm.allreduce %dbeta : (tensor<4xf64>) -> tensor<4xf64>
    %sdw2 = comm.allreduce %dw2 : (tensor<8x4xf64>) -> tensor<8x4xf64>
    %sdb1 = comm.allreduce %db1 : (tensor<8xf64>) -> tensor<8xf64>
    %sdw1 = comm.allreduce %dw1 : (tensor<4x8xf64>) -> tensor<4x8xf64>
    func.return %loss, %dx, %sdw1, %sdb1, %sdw2, %sdgamma, %sdbeta, %sdwg, %dwe : tensor<f64>, tensor<8x4xf64>, tensor<4x8xf64>, tensor<8xf64>, tensor<8x4xf64>, tensor<4xf64>, tensor<4xf64>, tensor<4x2xf64>, tensor<1x4x4xf64>
  }
}
