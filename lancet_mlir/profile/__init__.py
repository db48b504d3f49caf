"""Profiles and cost models: what each op costs, in µs.

* `keys`: op keys (`comp.matmul;T<64x128xf32>,T<128x256xf32>,|T<64x256xf32>`);
* `profile_db`: ProfileDB (JSON and Lancet `.profile`), sample averaging, merging;
* `mpi_sync`, `mpi_util`: cross-rank averaging, launching mpiexec;
* `comm_model`, `comm_loaders`: fitted collective tables (nccl-tests, XLA, Lancet CSV), alpha-beta;
* `devices`, `roofline`: GPU specs and roofline / calibrated matmul estimates;
* `cost_model`: CostConfig / CostModel, the priority order every pass uses;
* `measure`, `numpy_backend`, `cuda_backend`: measuring op times.
"""
