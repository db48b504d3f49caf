"""The partitioned candidates of `lancet-schedule{partition=auto}`, each a partitioned copy of
the module: the stages (which passes, with which options) are the caller's; here each runs
on its own clone, and a stage that fails or partitions nothing is left out."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

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
    left out silently: it would only repeat the unpartitioned module. All clones are alive
    together; `lazy_candidates` builds one at a time.
    """
    built = lazy_candidates(module, stages, refused)
    return [(label, trial) for label, trial in built if trial is not None]


def lazy_candidates(
    module: ModuleOp,
    stages: Sequence[tuple[str, Stage]],
    refused: Callable[[str, str], None] = lambda label, reason: None,
    skip: Callable[[str], str | None] = lambda label: None,
) -> Iterator[tuple[str, ModuleOp | None]]:
    """`partition_candidates` one stage at a time: (label, its clone of `module`), or
    (label, None) for a stage that failed (reported to `refused` first) or partitions
    nothing. The next clone is built only when the caller asks for it, so a caller that
    drops each trial it does not keep holds one or two clones at a time, not one per stage
    (`module` must not change in between). `skip(label)`, asked right before a stage would
    be built (so it sees what the caller learnt from the candidates before), gives a reason
    not to build it (reported to `refused`, then (label, None)) or None."""
    before = count_parts(module)
    for label, stage in stages:
        reason = skip(label)
        if reason is not None:
            refused(label, reason)
            yield label, None
            continue
        trial = _built(module, label, stage, before, refused)
        yield label, trial
        trial = None  # dropped before the next clone is built, unless the caller keeps it


def build_candidate(
    module: ModuleOp,
    label: str,
    stage: Stage,
    refused: Callable[[str, str], None] = lambda label, reason: None,
    before: int | None = None,
) -> ModuleOp | None:
    """One stage's candidate as `lazy_candidates` builds it: `stage`'s clone of `module`, or
    None when the stage fails (reported to `refused`) or partitions nothing (`before`:
    `count_parts(module)`, when the caller has it)."""
    return _built(module, label, stage, count_parts(module) if before is None else before, refused)


def _built(
    module: ModuleOp,
    label: str,
    stage: Stage,
    before: int,
    refused: Callable[[str, str], None],
) -> ModuleOp | None:
    """`stage`'s clone of `module`, or None when it fails (reported) or partitions nothing
    (`before`: the input's `count_parts`)."""
    trial = clone_located(module)  # an error about one of its ops names the input's line
    try:
        stage(trial)
    except PassFailedException as exc:
        refused(label, str(exc))
        return None
    return trial if count_parts(trial) != before else None


def count_parts(module: ModuleOp) -> int:
    """Ops tagged `lancet.part`: a partition stage that changed the module added some."""
    return sum(1 for o in module.walk() if attrs.PART in o.attributes)
