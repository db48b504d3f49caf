"""The cost model: what each op costs, in µs.

* `keys`: op keys (`comp.matmul;T<64x128xf32>,T<128x256xf32>,|T<64x256xf32>`);
* `profile_db`: ProfileDB (JSON and Lancet `.profile`), sample averaging, merging;
* `comm_model`, `comm_loaders`: fitted collective tables (nccl-tests, XLA, Lancet CSV), alpha-beta;
* `devices`, `clusters`, `roofline`: GPU specs, cluster presets, roofline / calibrated matmul estimates;
* `cost_model`: CostConfig / CostModel, the priority order every pass uses;
* `settings`: the cost configuration read from module attributes and pass options.
"""
