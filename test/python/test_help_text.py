"""Help text: every option with a default shows it, device choices are listed, --comm-table
names the formats it reads (issue #12 item 10)."""

from __future__ import annotations

import argparse
import re

from helpers import run_tool

from lancet_mlir.cost.devices import device_names
from lancet_mlir.tools import lancet_model, lancet_profile, lancet_run


def _sub_help(parser: argparse.ArgumentParser, command: str) -> str:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return action.choices[command].format_help()
    raise AssertionError(f"no subcommand {command}")


def _flat(text: str) -> str:
    return re.sub(r"\s+", " ", text)


def test_model_help_shows_every_default() -> None:
    text = _flat(_sub_help(lancet_model._build_parser(), "gpt2-moe"))
    for flag, default in [
        ("--layers", "12"),
        ("--hidden", "768"),
        ("--heads", "16"),
        ("--seq", "512"),
        ("--batch", "48"),
        ("--world-size", "16"),
        ("--gate", "switch"),
        ("--capacity-factor", "1.0"),
        ("--dtype", "f32"),
        ("--optimizer", "adam"),
        ("--ffn-mult", "4"),
    ]:
        assert re.search(rf"{flag} \S+ .*?\(default: {re.escape(default)}\)", text), flag


def test_defaults_not_repeated_and_none_not_shown() -> None:
    text = _flat(_sub_help(lancet_profile.build_parser(), "measure"))
    assert "--iters ITERS measured runs per op (default 20) --seed" in text  # said once
    assert "--backend {cpu,cuda} (default: cpu)" in text
    assert "default: None" not in text
    run_text = _flat(lancet_run.build_parser().format_help())
    assert "default: None" not in run_text
    assert "(default by dtype: f64 1e-9, f32 1e-4, f16 1e-2; integers exact)" in run_text


def test_device_choices_listed() -> None:
    names = ", ".join(device_names())
    assert "h100" in names
    assert "b200" in names
    assert names in _flat(_sub_help(lancet_profile.build_parser(), "from-xla"))
    opt = run_tool(["lancet-opt", "--help"])
    assert opt.returncode == 0
    text = _flat(opt.stdout)
    assert f"one of: {names}" in text
    assert (
        "--comm-table FILE measured collective times: lancet-mlir CSV, nccl-tests log or XLA"
        in text
    )
    assert "-t TARGET, --target TARGET" in text
    assert "(default: mlir)" in text
