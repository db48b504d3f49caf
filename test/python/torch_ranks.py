"""Two real gloo ranks for the PyTorch tests: one spawn runs every check of a list.

Each rank (1 thread) initialises a gloo group on a free port, then for each named check
captures the model's step with `make_fx`, runs eager autograd, the captured graph and the
optimized graph on its own data, and records equality and the bytes each collective sent.
The parent gets one dict per rank.
"""

from __future__ import annotations

import os
import socket
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "examples" / "torch"))

import torch_models as tm  # noqa: E402

PIPELINE = "lancet-schedule{partition=none max-seconds=0.1}"
WORLD = 2


def free_port() -> int:
    """A TCP port nobody listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


PLAN_CFG = tm.MoeConfig(world=WORLD, d=256, hidden=1024, heads=2, seq=64, batch=8)
"""The capacity MoE that the partition library's plan splits in part ("plan"): 512 tokens
per rank, 4 experts of 128 slots, with the costs of `PLAN_COSTS`."""
PLAN_COSTS: dict[str, Any] = {"cluster": "p3dn", "gpus_per_node": 1, "network_gbps": 20.0}
"""p3dn's V100s, one per node on a 20 Gb/s network: the exchanges cost about what the
experts do, so the plan splits the forward pair (in 2: 352.2 against 365.4 us) and leaves the
backward whole. (It was 25 Gb/s until small GEMMs paid their serial K loop, cost/devices.py
`matmul_k_step_us`: the parts' GEMMs got dearer, and at 25 Gb/s no split pays any more.)"""


def model(name: str, rank: int) -> tuple[Callable[..., Any], list[torch.Tensor]]:
    """The step and this rank's arguments of a named test model."""
    if name == "mlp":
        cfg = tm.MlpConfig(world=WORLD)
        return tm.ddp_mlp_step(cfg), [*tm.mlp_params(cfg), *tm.mlp_data(cfg, rank=rank)]
    if name == "plan":
        cfg = PLAN_CFG
        params = tm.moe_params(cfg, rank=rank)
        return tm.moe_step(cfg), [*params, *tm.moe_data(cfg, rank=rank)]
    cfg = tm.MoeConfig(world=WORLD)
    dropless = name == "dropless"
    params = tm.moe_params(cfg, rank=rank, dropless=dropless)
    return tm.moe_step(cfg, dropless=dropless), [*params, *tm.moe_data(cfg, rank=rank)]


class _Counter(torch.fx.Interpreter):
    """Runs a graph and adds up the bytes each collective sends (its input's bytes; for an
    all-gather, the larger output: nccl-tests' convention, as the comm ops count)."""

    sent = 0

    def call_function(self, target: Any, args: Any, kwargs: Any) -> Any:
        out = super().call_function(target, args, kwargs)
        name = getattr(getattr(target, "overloadpacket", None), "__name__", "")
        if name in (
            "all_reduce",
            "all_to_all_single",
            "all_gather_into_tensor",
            "reduce_scatter_tensor",
        ):
            sent = args[0].numel() * args[0].element_size()
            got = out.numel() * out.element_size()
            self.sent += max(sent, got) if name != "all_to_all_single" else sent
        return out


def _equal(a: Sequence[torch.Tensor], b: Sequence[torch.Tensor]) -> bool:
    return len(a) == len(b) and all(torch.equal(x, y) for x, y in zip(a, b, strict=True))


def _close(a: Sequence[torch.Tensor], b: Sequence[torch.Tensor], tol: float) -> bool:
    return len(a) == len(b) and all(
        torch.allclose(x, y, rtol=tol, atol=tol) for x, y in zip(a, b, strict=True)
    )


_CAPTURED: dict[str, tuple[Any, list[torch.Tensor], Any, torch.fx.GraphModule]] = {}
"""Per rank: base model name -> (step, args, eager result, captured graph)."""


def check(name: str, rank: int) -> dict[str, Any]:
    """One named check on this rank (see module doc)."""
    import lancet_mlir.torch as lt
    from lancet_mlir.dialects.comm import CollectiveOp

    base, _, option = name.partition(":")
    if base not in _CAPTURED:
        step, args = model(base, rank)
        _CAPTURED[base] = (
            step,
            args,
            step(*args),
            lt.capture(step, args, world_size=WORLD, rank=rank),
        )
    step, args, eager, gm = _CAPTURED[base]
    if option == "compile":
        torch._dynamo.reset()
        reports: list[dict] = []
        with torch._dynamo.config.patch(trace_autograd_ops=True):
            compiled = torch.compile(
                step,
                backend=lt.backend(
                    pipeline=PIPELINE,
                    cluster="p3dn",
                    reports=reports,
                    partition=2 if base == "capacity" else None,
                ),
                fullgraph=True,
            )
            got = compiled(*args)
        return {
            "compiled_equal": _equal(got, eager),
            "compiled_close": _close(got, eager, 1e-5),
            "graphs": len(reports),
            "moe_parts": [r["moe_parts"] for r in reports],
        }
    partition: int | str | None = int(option) if option.isdigit() else option or None
    costs: dict[str, Any] = PLAN_COSTS if base == "plan" else {"cluster": "p3dn"}
    opt = lt.optimize(gm, world_size=WORLD, pipeline=PIPELINE, partition=partition, **costs)
    counter = _Counter(gm)
    original = counter.run(*args)
    optimized = opt.graph_module(*args)
    imported = lt.import_graph(gm, world_size=WORLD)
    comm_bytes = 0.0
    for op in imported.walk():
        if isinstance(op, CollectiveOp):
            fill = op.attributes.get("lancet.fill")
            comm_bytes += op.payload_bytes() * (fill.value.data if fill is not None else 1.0)  # type: ignore[union-attr]
    return {
        "original_equal": _equal(original, eager),
        "optimized_equal": _equal(optimized, eager),
        "optimized_close": _close(optimized, eager, 1e-5),
        "sent_bytes": counter.sent,
        "imported_bytes": comm_bytes,
        "speedup": opt.report["speedup"],
        "all_to_alls": sum(
            1 for n in opt.graph_module.graph.nodes if "all_to_all" in str(n.target)
        ),
        "moe_plan": [(p["pair"][0], p["parts"]) for p in opt.report["moe_plan"]],
        "max_abs_diff": max(
            float((a - b).abs().max()) for a, b in zip(optimized, eager, strict=True)
        ),
    }


def _worker(rank: int, port: int, out_dir: str, checks: list[str]) -> None:
    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=WORLD)
    try:
        results = {}
        for name in checks:
            start = time.perf_counter()
            results[name] = check(name, rank)
            results[name]["seconds"] = time.perf_counter() - start
    finally:
        dist.destroy_process_group()
    torch.save(results, Path(out_dir) / f"rank{rank}.pt")


def run_ranks(checks: list[str]) -> list[dict[str, dict[str, Any]]]:
    """Run `checks` on 2 gloo ranks; one result dict (check name -> values) per rank."""
    with tempfile.TemporaryDirectory() as out:
        mp.spawn(_worker, args=(free_port(), out, checks), nprocs=WORLD, join=True)
        return [torch.load(Path(out) / f"rank{r}.pt") for r in range(WORLD)]


if __name__ == "__main__":
    t = time.time()
    print(run_ranks(sys.argv[1:]), time.time() - t)
