"""lancet-model: generate training graphs (one iteration, one rank) as MLIR text.

```
lancet-model gpt2-moe --layers 12 --hidden 768 --heads 16 --seq 512 --batch 48 \
    --world-size 16 --experts-per-rank 2 [--gate switch|top2] [--moe-every 2] \
    [--capacity-factor 1.0] [--vocab 50257] [--dtype f32] [--optimizer adam|sgd] [-o out.mlir]
lancet-model preset gpt2_moe_nl12_m768_nh16_sl512_b48 [--world-size 8] [-o out.mlir]
lancet-model list
```
The module is printed in custom syntax to stdout, or written atomically to `-o FILE`.
Errors end with one line `lancet-model: error: ...` and exit code 1.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Sequence

from lancet_mlir.models.gpt2_moe import (
    DTYPES,
    GATES,
    OPTIMIZERS,
    PRESETS,
    GPT2MoEConfig,
    build_gpt2_moe,
    param_specs,
)
from lancet_mlir.tools.cli import ArgumentParser, positive_int
from lancet_mlir.tools.errors import UserError, run_cli

TOOL = "lancet-model"


def _build_parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(prog=TOOL, description="Generate training-iteration graphs as MLIR.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=ArgumentParser)
    d = GPT2MoEConfig()
    g = sub.add_parser("gpt2-moe", help="GPT-2-style MoE transformer (one rank)")
    g.add_argument("--layers", type=positive_int, default=d.layers, help="transformer layers")
    g.add_argument("--hidden", type=positive_int, default=d.hidden, help="hidden size")
    g.add_argument("--heads", type=positive_int, default=d.heads, help="attention heads")
    g.add_argument("--seq", type=positive_int, default=d.seq, help="sequence length")
    g.add_argument("--batch", type=positive_int, default=d.batch, help="micro-batch per rank")
    g.add_argument(
        "--world-size",
        type=positive_int,
        default=d.world_size,
        help="ranks (expert-parallel group)",
    )
    g.add_argument(
        "--experts-per-rank",
        type=positive_int,
        default=d.experts_per_rank,
        help="experts each rank holds",
    )
    g.add_argument("--gate", choices=GATES, default=d.gate, help="MoE gate")
    g.add_argument("--moe-every", type=int, default=d.moe_every,
                   help="layer i is MoE iff i %% k == k-1 (0: no MoE layer)")  # fmt: skip
    g.add_argument(
        "--capacity-factor",
        type=float,
        default=d.capacity_factor,
        help="GShard capacity C = ceil(factor * k * tokens / experts)",
    )
    g.add_argument("--vocab", type=positive_int, default=d.vocab, help="vocabulary size")
    g.add_argument("--dtype", choices=DTYPES, default=d.dtype, help="element type")
    g.add_argument(
        "--optimizer",
        choices=OPTIMIZERS,
        default=d.optimizer,
        help="optimizer step after the backward pass",
    )
    g.add_argument(
        "--ffn-mult", type=positive_int, default=d.ffn_mult, help="FFN width = mult x hidden"
    )
    g.add_argument("-o", "--output", help="output file (default: stdout)")
    p = sub.add_parser("preset", help="one of Lancet's paper configurations")
    p.add_argument("name", help="preset name (see `lancet-model list`)")
    p.add_argument("--world-size", type=positive_int, default=None)
    p.add_argument("-o", "--output", help="output file (default: stdout)")
    sub.add_parser("list", help="list the presets")
    return parser


def config_from_args(args: argparse.Namespace) -> GPT2MoEConfig:
    """The model configuration the parsed command line asks for."""
    if args.command == "preset":
        cfg = PRESETS.get(args.name)
        if cfg is None:
            raise UserError(f"unknown preset '{args.name}' (known: {', '.join(PRESETS)})")
        if args.world_size is not None:
            cfg = dataclasses.replace(cfg, world_size=args.world_size)
        return cfg
    fields = [f.name for f in dataclasses.fields(GPT2MoEConfig)]
    return GPT2MoEConfig(**{name: getattr(args, name) for name in fields})


def describe(cfg: GPT2MoEConfig) -> str:
    """One line summarising a configuration (sizes, experts, capacity, parameter count)."""
    params = sum(_numel(s.shape) for s in param_specs(cfg))
    return (
        f"layers={cfg.layers} hidden={cfg.hidden} heads={cfg.heads} seq={cfg.seq} "
        f"batch={cfg.batch} world_size={cfg.world_size} experts={cfg.num_experts} "
        f"({cfg.experts_per_rank}/rank) gate={cfg.gate} capacity={cfg.capacity} "
        f"moe_layers={len(cfg.moe_layers)} params/rank={params}"
    )


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def _emit(cfg: GPT2MoEConfig, output: str | None) -> None:
    from lancet_mlir.support.files import check_output_folder, write_atomic

    if output is not None:
        check_output_folder(output)  # before building: big models take a while
    text = str(build_gpt2_moe(cfg)) + "\n"
    if output is None:
        sys.stdout.write(text)
        return
    write_atomic(output, text)


def main(argv: Sequence[str] | None = None) -> None:
    """Console entry point of `lancet-model`."""

    def body() -> int:
        args = _build_parser().parse_args(argv)
        if args.command == "list":
            width = max(len(n) for n in PRESETS)
            for name, cfg in PRESETS.items():
                sys.stdout.write(f"{name:<{width}}  {describe(cfg)}\n")
            return 0
        _emit(config_from_args(args), args.output)
        return 0

    run_cli(TOOL, body)


if __name__ == "__main__":
    main()
