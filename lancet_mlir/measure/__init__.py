"""Measuring op times: back-ends (numpy, cuda-python + CuPy), robust statistics, MPI averaging.

* `measure`: the measurement driver (budget, rounds, outputs);
* `numpy_backend`, `cuda_backend`: the back-ends;
* `robust`: robust summaries of samples;
* `mpi_sync`: averaging profiles across MPI ranks.
"""
