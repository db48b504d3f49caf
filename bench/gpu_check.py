"""GPU check: predicted vs measured iteration time of FIFO and lancet-schedule orders.

NOT YET RUN ON A GPU: written and tested for syntax/imports on a CPU-only machine
(docs/runtime.md). Run through `bench/gpu_check.sh`, which generates the model and profiles
it with `lancet-profile measure --backend cuda` first.

For each order of the module (program order, data-parallel-schedule = Lancet's FIFO,
lancet-schedule with the measured profile):

* predicted: `evaluate_fixed_order` of the simulator with the cost model (profile for
  compute, shipped comm table for collectives);
* measured: the block replayed on one GPU with real kernels, in block order, on two CUDA
  streams: compute ops run the kernel registry's implementation with CuPy on the compute
  stream; a collective (one GPU has no peers) is a stand-in on the communication stream: a
  spin kernel lasting the cost model's time of that collective, followed by a cheap copy
  giving its result the right shape. Cross-stream data dependencies become
  `cudaStreamWaitEvent`s. The makespan is the time between events recorded before the first
  op and after both streams finished (median of `--iters` runs).

So the comparison checks the compute profile, the simulator's overlap model and the order,
with communication durations taken as predicted. The host launch time of the replay is
printed too: if it exceeds the measured makespan, the replay is launch-bound (use a bigger
model) and the numbers say little.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from typing import Any

SPIN_SOURCE = r"""
extern "C" __global__ void lancet_spin_ns(unsigned long long ns) {
    unsigned long long t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    do {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    } while (t - t0 < ns);
}
"""


class Replayer:
    """Replays a block on one GPU with a compute and a communication stream."""

    def __init__(self, device_index: int = 0):
        import cupy

        from lancet_mlir.measure.cuda_backend import check_cuda, runtime_module

        self.cupy = cupy
        self.rt = runtime_module()
        self.check = check_cuda
        check_cuda(self.rt.cudaSetDevice(device_index), "cudaSetDevice")
        cupy.cuda.Device(device_index).use()
        flags = self.rt.cudaStreamNonBlocking
        self.streams = [check_cuda(self.rt.cudaStreamCreateWithFlags(flags), "cudaStreamCreate")
                        for _ in range(2)]  # fmt: skip
        self.ext = [cupy.cuda.ExternalStream(int(s), device_index) for s in self.streams]
        self.start = check_cuda(self.rt.cudaEventCreate(), "cudaEventCreate")
        self.end = check_cuda(self.rt.cudaEventCreate(), "cudaEventCreate")
        self.spin = cupy.RawKernel(SPIN_SOURCE, "lancet_spin_ns")
        self._events: list[Any] = []

    def _done_events(self, n: int) -> list[Any]:
        flags = self.rt.cudaEventDisableTiming
        while len(self._events) < n:
            self._events.append(
                self.check(self.rt.cudaEventCreateWithFlags(flags), "cudaEventCreate")
            )
        return self._events[:n]

    def device_inputs(self, func: Any, seed: int = 0) -> list[Any]:
        """Rank 0's deterministic arguments (as `lancet-run` makes them), on the GPU."""
        from lancet_mlir.runtime.values import make_inputs

        types = list(func.function_type.inputs.data)
        attrs = list(func.arg_attrs.data) if func.arg_attrs is not None else [None] * len(types)
        with self.ext[0]:
            return [self.cupy.asarray(x) for x in make_inputs(types, attrs, seed=seed, rank=0)]

    def _collective(self, op: Any, ins: list[Any], us: float) -> list[Any]:
        """Stand-in for a collective: spin for its predicted time, then shape the results."""
        cp = self.cupy
        self.spin((1,), (1,), (cp.uint64(max(0, int(us * 1000))),))
        outs = []
        axis = getattr(op, "axis", None)
        axis = axis.value.data if axis is not None else 0
        for x, res in zip(ins, op.results, strict=True):
            shape = tuple(res.type.get_shape())
            size = 1
            for d in shape:
                size *= d
            if size == x.size:
                outs.append(x.reshape(shape))
            elif size > x.size:  # allgather: the local tensor repeated along the axis
                outs.append(cp.concatenate([x] * (size // x.size), axis=axis))
            else:  # reduce_scatter: the first chunk along the axis
                outs.append(cp.ascontiguousarray(cp.split(x, x.size // size, axis=axis)[0]))
        return outs

    def run_once(
        self, func: Any, graph: Any, durations: list[float], args: list[Any]
    ) -> tuple[float, float]:
        """(measured makespan µs, host launch time µs) of one replay of the block."""
        from lancet_mlir.dialects.comp import kernel_of, kernel_params
        from lancet_mlir.runtime.kernels import run_kernel

        rt, check = self.rt, self.check
        sc, sm = self.streams
        done = self._done_events(len(graph.ops))
        env = dict(zip(func.body.block.args, args, strict=True))
        host0 = time.perf_counter()
        check(rt.cudaEventRecord(self.start, sc), "cudaEventRecord")
        check(rt.cudaStreamWaitEvent(sm, self.start, 0), "cudaStreamWaitEvent")
        last_comm = None
        for i, op in enumerate(graph.ops):
            s = 1 if graph.is_comm[i] else 0
            for p in graph.preds[i]:
                if graph.is_comm[p] != graph.is_comm[i]:
                    check(
                        rt.cudaStreamWaitEvent(self.streams[s], done[p], 0), "cudaStreamWaitEvent"
                    )
            ins = [env[v] for v in op.operands]
            with self.ext[s]:
                if graph.is_comm[i]:
                    outs = self._collective(op, ins, durations[i])
                    last_comm = i
                else:
                    outs = run_kernel(kernel_of(op), ins, kernel_params(op), xp=self.cupy)
            check(rt.cudaEventRecord(done[i], self.streams[s]), "cudaEventRecord")
            env.update(zip(op.results, outs, strict=True))
        if last_comm is not None:
            check(rt.cudaStreamWaitEvent(sc, done[last_comm], 0), "cudaStreamWaitEvent")
        check(rt.cudaEventRecord(self.end, sc), "cudaEventRecord")
        host_us = (time.perf_counter() - host0) * 1e6
        check(rt.cudaEventSynchronize(self.end), "cudaEventSynchronize")
        ms = check(rt.cudaEventElapsedTime(self.start, self.end), "cudaEventElapsedTime")
        env.clear()  # buffers are released only after both streams finished with them
        return float(ms) * 1000.0, host_us

    def measure(
        self, func: Any, graph: Any, durations: list[float], iters: int, warmup: int = 2
    ) -> tuple[float, float]:
        """Median makespan and median host launch time over `iters` replays."""
        args = self.device_inputs(func)
        for _ in range(warmup):
            self.run_once(func, graph, durations, args)
        runs = [self.run_once(func, graph, durations, args) for _ in range(iters)]
        return statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs)


def _transformed(module: Any, pipeline: str) -> Any:
    from xdsl.passes import PassPipeline

    from lancet_mlir.passes import get_all_passes
    from lancet_mlir.runtime.loader import make_context

    out = module.clone()
    if pipeline:
        PassPipeline.parse_spec(get_all_passes(), pipeline).apply(make_context(), out)
    return out


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit code (2 when no GPU or no CuPy)."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True, help="the module (one MoE layer)")
    p.add_argument("--profile", required=True, help="its cuda profile (lancet-profile measure)")
    p.add_argument("--out", required=True, help="folder for gpu_check.json")
    p.add_argument("--iters", type=int, default=10)
    args = p.parse_args(argv)

    from lancet_mlir.measure.cuda_backend import gpu_status

    count, reason = gpu_status()
    if count == 0:
        print(f"gpu_check: no CUDA GPU ({reason})", file=sys.stderr)
        return 2
    try:
        import cupy  # noqa: F401
    except ImportError:
        print("gpu_check: CuPy is missing (pip install cupy-cuda13x)", file=sys.stderr)
        return 2

    from xdsl.dialects.builtin import StringAttr

    from lancet_mlir.attrs import DEVICE, PROFILE
    from lancet_mlir.cost.cost_model import CostConfig, CostModel
    from lancet_mlir.cost.devices import device_names
    from lancet_mlir.cost.profile_db import ProfileDB
    from lancet_mlir.graph.dataflow import DataflowGraph
    from lancet_mlir.runtime.executor import select_function
    from lancet_mlir.runtime.loader import load_module
    from lancet_mlir.sim import evaluate_fixed_order

    module = load_module(args.model).module
    measured_on = str(ProfileDB.load(args.profile).metadata.get("device", "h100")).lower()
    device = measured_on if measured_on in device_names() else "h100"
    cfg = CostConfig(profiles=(args.profile,), device=device)
    # lancet-schedule costs with the measured profile: say so on the module
    module.attributes[DEVICE] = StringAttr(device)
    module.attributes[PROFILE] = StringAttr(args.profile)
    cost = CostModel.from_config(cfg)
    replayer = Replayer(0)
    rows = []
    for label, pipeline in (("program order", ""), ("FIFO (data-parallel-schedule)", "data-parallel-schedule"),
                            ("lancet-schedule", "lancet-schedule")):  # fmt: skip
        m = _transformed(module, pipeline)
        func = select_function(m)
        graph = DataflowGraph.from_block(func.body.block)
        durations = [float(d) for d in cost.graph_times(graph)]
        predicted = evaluate_fixed_order(graph, durations).makespan_us
        measured, host = replayer.measure(func, graph, durations, args.iters)
        compute = sum(d for d, c in zip(durations, graph.is_comm, strict=True) if not c)
        comm = sum(d for d, c in zip(durations, graph.is_comm, strict=True) if c)
        rows.append({"order": label, "predicted_us": predicted, "measured_us": measured,
                     "host_launch_us": host, "compute_us": compute, "comm_us": comm,
                     "ops": len(graph.ops)})  # fmt: skip
    print(
        f"device: {replayer.cupy.cuda.runtime.getDeviceProperties(0)['name'].decode()} "
        f"(cost model device {device}); model {os.path.basename(args.model)}"
    )
    print(f"{'order':32} {'predicted us':>13} {'measured us':>12} {'meas/pred':>9} {'host us':>10}")
    for r in rows:
        ratio = r["measured_us"] / r["predicted_us"] if r["predicted_us"] else float("nan")
        flag = "  (launch-bound!)" if r["host_launch_us"] > r["measured_us"] else ""
        print(
            f"{r['order']:32} {r['predicted_us']:13.1f} {r['measured_us']:12.1f} {ratio:9.3f} "
            f"{r['host_launch_us']:10.1f}{flag}"
        )
    fifo, lancet = rows[1], rows[2]
    print(
        f"lancet-schedule vs FIFO: predicted speed-up {fifo['predicted_us'] / lancet['predicted_us']:.3f}, "
        f"measured {fifo['measured_us'] / lancet['measured_us']:.3f}"
    )
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "gpu_check.json"), "w") as f:
        json.dump({"device": device, "rows": rows}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
