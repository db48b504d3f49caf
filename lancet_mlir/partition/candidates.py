"""The partitioned candidates of `lancet-schedule{partition=auto}`, each a partitioned copy of
the module: the stages (which passes, with which options) are the caller's; here each runs
on its own clone, and a stage that fails or partitions nothing is left out."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from xdsl.dialects.builtin import ModuleOp
from xdsl.utils.exceptions import PassFailedException

from lancet_mlir import attrs
from lancet_mlir.support.locations import clone_located

Stage = Callable[[ModuleOp], None]
"""Partitions a module in place; PassFailedException when it cannot."""


def partition_candidates(
    module: ModuleOp,
    stages: Sequence[tuple[str, Stage]],
    refused: Callable[[str, str], None] = lambda label, reason: None,
) -> list[tuple[str, ModuleOp]]:
    """Each stage's partitioned clone of `module` with its label, in the stages' order; a
    stage that fails is left out and reported to `refused(label, reason)` right away.

    A stage that partitions nothing (no MoE layer, a never-worse check kept the input) is
    left out silently: it would only repeat the unpartitioned module.
    """
    before = count_parts(module)
    trials: list[tuple[str, ModuleOp]] = []
    for label, stage in stages:
        trial = clone_located(module)  # an error about one of its ops names the input's line
        try:
            stage(trial)
        except PassFailedException as exc:
            refused(label, str(exc))
            continue
        if count_parts(trial) == before:
            continue
        trials.append((label, trial))
    return trials


def count_parts(module: ModuleOp) -> int:
    """Ops tagged `lancet.part`: a partition stage that changed the module added some."""
    return sum(1 for o in module.walk() if attrs.PART in o.attributes)
