"""`lancet-torch`: a PyTorch training step as lancet-mlir IR.

    lancet-torch export my_step.py:make_step --world-size 8 -o step.mlir

`make_step()` (any name, in any Python file) returns `(step_fn, example_args)`: `step_fn` is
one training step (forward, `torch.autograd.grad`, functional collectives, the update) and
`example_args` its arguments. The step is captured with `make_fx` as rank `--rank` of a fake
process group of `--world-size` ranks and imported (`lancet_mlir.importers.torch`); the MLIR
goes to `-o` (stdout without it), ready for every `lancet-opt` pipeline:

    lancet-opt -p lancet-schedule --cluster p3dn step.mlir --report report.json

Needs the optional extra: `pip install 'lancet-mlir[torch]'`.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from lancet_mlir.support.errors import UserError
from lancet_mlir.tools.cli import ArgumentParser, non_negative_int, positive_int
from lancet_mlir.tools.errors import run_cli

TOOL = "lancet-torch"


def _parser() -> ArgumentParser:
    parser = ArgumentParser(prog=TOOL, description="Import a PyTorch training step as MLIR.")
    commands = parser.add_subparsers(dest="command", required=True)
    export = commands.add_parser("export", help="capture SCRIPT.py:FUNC's step and write its MLIR")
    export.add_argument(
        "target", metavar="SCRIPT.py:FUNC", help="FUNC() returns (step_fn, example_args)"
    )
    export.add_argument("--world-size", type=positive_int, required=True, help="ranks of the job")
    export.add_argument("--rank", type=non_negative_int, default=0, help="the rank captured")
    export.add_argument("-o", "--output", help="output file (default: stdout)")
    return parser


def _split_target(target: str) -> tuple[Path, str]:
    """(script, function name) of SCRIPT.py:FUNC, checked before torch is imported."""
    script, sep, name = target.rpartition(":")
    if not sep or not script or not name:
        raise UserError(f"expected SCRIPT.py:FUNC, got '{target}'")
    path = Path(script)
    if path.is_dir():
        raise UserError(f"{script}: is a folder, not a Python file")
    if not path.is_file():
        raise UserError(f"{script}: no such file")
    return path, name


def _load(target: str) -> tuple[Any, Sequence[Any]]:
    path, name = _split_target(target)
    script = str(path)
    spec = importlib.util.spec_from_file_location(f"_lancet_torch_{path.stem}", path)
    if spec is None or spec.loader is None:
        raise UserError(f"{script}: not a Python file")
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(path.resolve().parent))
    try:
        spec.loader.exec_module(module)
    except SystemExit as exc:  # the script's own `sys.exit()`: no step to export
        raise UserError(f"{script} called sys.exit({exc.code!r}) while loading") from None
    finally:
        sys.path.pop(0)
    func = getattr(module, name, None)
    if not callable(func):
        raise UserError(f"{script}: has no function '{name}'")
    try:
        made = func()
    except SystemExit as exc:
        raise UserError(f"{target} called sys.exit({exc.code!r})") from None
    except Exception as exc:  # noqa: BLE001 - the user's code: say where it failed
        raise UserError(f"{target} raised {_described(exc)}") from exc
    if not (
        isinstance(made, (tuple, list))
        and len(made) == 2
        and callable(made[0])
        and isinstance(made[1], (tuple, list))
    ):
        raise UserError(f"{target}: must return (step_fn, example_args), a tuple or list of the "
                        "step's arguments")  # fmt: skip
    return made[0], list(made[1])


def _described(exc: BaseException) -> str:
    """`KeyError: 'x'`: the exception's type and its message's first line."""
    detail = str(exc).strip().splitlines()
    return type(exc).__name__ + (f": {detail[0]}" if detail else "")


def main(argv: Sequence[str] | None = None) -> None:
    """Console entry point of `lancet-torch`."""

    def body() -> int:
        args = _parser().parse_args(argv)
        from lancet_mlir.support.files import check_output_folder, write_atomic

        script, _ = _split_target(args.target)  # a bad target fails fast, before torch's import
        if args.output is not None:  # never over the script itself (or a link to it)
            check_output_folder(args.output, "-o", [str(script)])
        try:
            import torch  # noqa: F401
        except ImportError:
            raise UserError("PyTorch is not installed: pip install 'lancet-mlir[torch]'") from None
        from lancet_mlir.torch import capture, import_graph

        if not 0 <= args.rank < args.world_size:
            raise UserError(f"--rank: must be in [0, {args.world_size}), got {args.rank}")
        step, example = _load(args.target)
        try:
            gm = capture(step, example, world_size=args.world_size, rank=args.rank)
        except UserError:
            raise
        except Exception as exc:  # noqa: BLE001 - the step is the user's code
            raise UserError(f"capturing {args.target}'s step: it raised {_described(exc)}") from exc
        text = str(import_graph(gm, world_size=args.world_size)) + "\n"
        if args.output is None:
            sys.stdout.write(text)
        else:
            write_atomic(args.output, text)
        return 0

    run_cli(TOOL, body)


if __name__ == "__main__":
    main()
