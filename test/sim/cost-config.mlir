// RUN: lancet-opt %s -p simulate --split-input-file | filecheck %s --check-prefix=H100
// RUN: xdsl-opt %s -p simulate --split-input-file | filecheck %s --check-prefix=H100
// RUN: lancet-opt %s --cluster p3dn -p simulate --split-input-file | filecheck %s --check-prefix=P3DN
// RUN: xdsl-opt %s -p 'simulate{cluster=p3dn}' --split-input-file | filecheck %s --check-prefix=OPT
// RUN: lancet-opt %s --cluster dgx-h100 -p 'simulate{cluster=p3dn}' --split-input-file | filecheck %s --check-prefix=OPT
// RUN: lancet-opt %s --cluster p3dn --network-gbps 100 -p simulate --split-input-file | filecheck %s --check-prefix=FAST

// The cost configuration of a pass: its options, else the module's lancet.* attributes
// (which lancet-opt's --cluster/--device/... flags set), else the defaults (H100, DGX H100
// network). A 16 MiB all-to-all over 16 ranks = 2 nodes of 8 GPUs; each GPU sends 8/16 of it
// off its node at 80% of its network share:
//   default (h100, 400 Gb/s per GPU, 15 us): 15 + 8388608 B / 40000 B/us = 224.7152 us
//   p3dn (v100, 12.5 Gb/s per GPU, 20 us):  20 + 8388608 B / 1250 B/us = 6730.8864 us
//   p3dn at 100 Gb/s per GPU:               20 + 8388608 B / 10000 B/us = 858.8608 us
builtin.module attributes {lancet.world_size = 16 : i64} {
  func.func @a2a(%x: tensor<4194304xf32>) -> tensor<4194304xf32> {
    %r = comm.all_to_all %x : (tensor<4194304xf32>) -> tensor<4194304xf32>
    func.return %r : tensor<4194304xf32>
  }
}
// H100:      builtin.module attributes {lancet.world_size = 16 : i64} {
// H100:      func.func @a2a
// H100-SAME:   lancet.makespan_us = 224.7152
// P3DN:      builtin.module attributes {lancet.world_size = 16 : i64, lancet.cluster = "p3dn"} {
// P3DN:      func.func @a2a
// P3DN-SAME:   lancet.makespan_us = 6730.8864
// OPT:       func.func @a2a
// OPT-SAME:    lancet.makespan_us = 6730.8864
// FAST:      builtin.module attributes {lancet.world_size = 16 : i64, lancet.cluster = "p3dn", lancet.network_gbps = 1.000000e+02 : f64} {
// FAST:      func.func @a2a
// FAST-SAME:   lancet.makespan_us = 858.8608
