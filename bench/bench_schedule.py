"""Benchmark: data-parallel-schedule and comm-bucket-fusion against plain parse + print.

Generates one func.func of N ops (a backward-like pattern: compute chains emitting
gradients that are all-reduced and consumed by an update), then measures in one process,
one run per size: parse, verify, the pass, print. Reports the ratio pass / (parse + print)
— ratios from one run are what this noisy 2-core machine can compare.

Usage: python bench/bench_schedule.py [--sizes 10000 50000 100000] [--out bench/results/schedule.json]
"""

from __future__ import annotations

import argparse
import io
import json
import sys
from pathlib import Path

from bench_common import comm_context, timed  # noqa: E402 - next to this script
from xdsl.parser import Parser
from xdsl.printer import Printer

from lancet_mlir.graph.rewrite import check_dominance
from lancet_mlir.passes.comm_bucket_fusion import CommBucketFusionPass
from lancet_mlir.passes.data_parallel_schedule import DataParallelSchedulePass

T = "tensor<256xf32>"


def make_module(n_ops: int) -> str:
    """Text of a func with about n_ops ops: per group of 4, two compute ops, an allreduce
    of the first one's result and an update consuming the allreduce."""
    lines = [f"func.func @step(%x: {T}) -> {T} {{"]
    prev = "%x"
    for g in range(n_ops // 4):
        lines.append(f'  %a{g} = "test.op"({prev}) : ({T}) -> {T}')
        lines.append(f'  %b{g} = "test.op"(%a{g}) : ({T}) -> {T}')
        lines.append(f"  %r{g} = comm.allreduce %a{g} : ({T}) -> {T}")
        lines.append(f'  %u{g} = "test.op"(%r{g}) : ({T}) -> {T}')
        prev = f"%b{g}"
    lines.append(f"  func.return {prev} : {T}")
    lines.append("}")
    return "\n".join(lines) + "\n"


def measure(n_ops: int) -> dict[str, float]:
    """Time parse, verify, dominance check, each pass and print on an n_ops module."""
    text = make_module(n_ops)
    ctx = comm_context()
    module, parse_s = timed(lambda: Parser(ctx, text, "bench.mlir").parse_module())
    _, verify_s = timed(module.verify)
    _, dominance_s = timed(lambda: check_dominance(module))

    def print_module() -> str:
        buf = io.StringIO()
        Printer(stream=buf).print_op(module)
        return buf.getvalue()

    _, print_s = timed(print_module)
    _, schedule_s = timed(lambda: DataParallelSchedulePass().apply(ctx, module))
    _, fusion_s = timed(lambda: CommBucketFusionPass(bucket_bytes=4096).apply(ctx, module))
    base = parse_s + print_s
    return {
        "ops": n_ops,
        "parse_s": parse_s,
        "print_s": print_s,
        "verify_s": verify_s,
        "dominance_check_s": dominance_s,
        "data_parallel_schedule_s": schedule_s,
        "comm_bucket_fusion_s": fusion_s,
        "schedule_ratio": schedule_s / base,
        "fusion_ratio": fusion_s / base,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 50_000, 100_000])
    parser.add_argument("--out", type=Path, default=Path("bench/results/schedule.json"))
    args = parser.parse_args()
    rows = []
    for n in args.sizes:
        row = measure(n)
        rows.append(row)
        print(f"{n} ops done", file=sys.stderr)
    header = (
        "| ops | parse s | print s | verify s | schedule s | schedule / (parse+print) "
        "| bucket fusion s | fusion / (parse+print) |"
    )
    print(header)
    print("|" + "---|" * 8)
    for r in rows:
        print(
            f"| {r['ops']} | {r['parse_s']:.2f} | {r['print_s']:.2f} | {r['verify_s']:.2f} "
            f"| {r['data_parallel_schedule_s']:.3f} | {100 * r['schedule_ratio']:.1f}% "
            f"| {r['comm_bucket_fusion_s']:.3f} | {100 * r['fusion_ratio']:.1f}% |"
        )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"rows": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()
