"""One home per concept: the shared dtype table, the bitset reachability utilities and the
typed timeline summary (issue #8 section 5)."""

from __future__ import annotations

import random
import re
from pathlib import Path

import numpy as np
import pytest
from helpers import closure
from hypothesis import given, settings
from hypothesis import strategies as st
from xdsl.dialects.builtin import (
    BFloat16Type,
    Float32Type,
    Float80Type,
    IndexType,
    IntegerType,
    Signedness,
    f64,
    i1,
    i64,
)

import lancet_mlir
from lancet_mlir.dialects.comm import element_bytes
from lancet_mlir.dialects.dtypes import DTYPE_BYTES, NUMPY_DTYPES, element_name
from lancet_mlir.dialects.kernels import dtype_bytes
from lancet_mlir.graph.core import Problem, topological_order
from lancet_mlir.graph.reach import ancestor_bits, bits_of, descendant_bits
from lancet_mlir.optimize.chains import reachability
from lancet_mlir.runtime.values import numpy_dtype_of
from lancet_mlir.sim import TimelineSummary, evaluate_fixed_order, summarize


def test_one_dtype_table_serves_comm_registry_and_runtime() -> None:
    assert element_name(Float32Type()) == "f32"
    assert element_name(BFloat16Type()) == "bf16"
    assert element_name(IntegerType(32, Signedness.SIGNED)) == "i32"
    assert element_name(IndexType()) == "i64"
    assert element_name(i1) == "i1"
    assert element_name(Float80Type()) is None
    for ty, name in (
        (f64, "f64"),
        (i64, "i64"),
        (BFloat16Type(), "bf16"),
        (IntegerType(16), "i16"),
    ):
        assert element_bytes(ty) == DTYPE_BYTES[name]
        assert numpy_dtype_of(ty) == np.dtype(NUMPY_DTYPES[name])
    assert numpy_dtype_of(BFloat16Type()) == np.dtype(np.float32)  # numpy has no bfloat16
    assert dtype_bytes("bf16") == 2
    with pytest.raises(ValueError, match="i16"):
        dtype_bytes("i16")  # in the table, but no kernel takes it


@st.composite
def dags(draw: st.DrawFn) -> tuple[list[list[int]], list[list[int]]]:
    n = draw(st.integers(0, 12))
    preds = [
        sorted(draw(st.sets(st.integers(0, i - 1), max_size=3))) if i else [] for i in range(n)
    ]
    succs: list[list[int]] = [[] for _ in range(n)]
    for c, ps in enumerate(preds):
        for p in ps:
            succs[p].append(c)
    return preds, succs


@settings(max_examples=60, deadline=None)
@given(dags())
def test_bitset_reachability_matches_graph_search(
    graph: tuple[list[list[int]], list[list[int]]],
) -> None:
    preds, succs = graph
    order = topological_order(preds, succs)
    anc, desc = ancestor_bits(preds, order), descendant_bits(succs, order)
    for v in range(len(preds)):
        assert set(bits_of(desc[v])) == closure(succs, v)
        assert set(bits_of(anc[v])) == closure(preds, v)
    problem = Problem(preds, succs, [None] * len(preds), [1.0] * len(preds))
    reach = reachability(problem)  # the optimizers use the same utilities
    assert reach.descendants == desc
    assert [reach.ancestors(v) for v in range(len(preds))] == anc


def test_topological_order_rejects_a_cycle() -> None:
    with pytest.raises(ValueError, match="cycle"):
        topological_order([[1], [0]], [[1], [0]])
    with pytest.raises(ValueError, match="cycle"):  # 1 -> 0 by data, 0 before 1 by the chain
        topological_order([[1], []], [[], [0]], chains=[[0, 1]])


def test_topological_order_by_key_and_chains() -> None:
    # 0 -> 2, 1 free; the key prefers 2, then 1, then 0, but 2 must wait for 0
    preds, succs = [[], [], [0]], [[2], [], []]
    assert topological_order(preds, succs) == [0, 1, 2]
    assert topological_order(preds, succs, key=[2, 1, 0]) == [1, 0, 2]
    assert topological_order(preds, succs, key=[5, 5, 0]) == [0, 2, 1]  # ties: smaller node
    # a chain 2 before 1 (a stream's launch order) holds 1 back until 2 ran
    assert topological_order(preds, succs, key=[2, 1, 0], chains=[[2, 1]]) == [0, 2, 1]


@settings(max_examples=60, deadline=None)
@given(dags(), st.randoms(use_true_random=False))
def test_topological_order_follows_the_key_where_edges_allow(
    graph: tuple[list[list[int]], list[list[int]]], rng: random.Random
) -> None:
    preds, succs = graph
    n = len(preds)
    key = [rng.randint(0, 3) for _ in range(n)]
    order = topological_order(preds, succs, key)
    position = {v: k for k, v in enumerate(order)}
    assert sorted(order) == list(range(n))
    assert all(position[p] < position[v] for v in range(n) for p in preds[v])
    # greedy: each node is the smallest (key, index) among those ready at its turn
    done: set[int] = set()
    for v in order:
        ready = [u for u in range(n) if u not in done and all(p in done for p in preds[u])]
        assert (key[v], v) == min((key[u], u) for u in ready)
        done.add(v)


_ROOT = Path(lancet_mlir.__file__).parent


def _homes(pattern: str, *also: str) -> list[str]:
    """The modules of lancet_mlir whose source matches `pattern` (and contains every `also`)."""
    rx = re.compile(pattern)
    out = []
    for f in sorted(_ROOT.rglob("*.py")):
        text = f.read_text()
        if rx.search(text) and all(a in text for a in also):
            out.append(str(f.relative_to(_ROOT)))
    return out


def test_one_home_per_graph_concept() -> None:
    """Issue 17, deliverable 2: one topological order with a priority key, one relink, one
    world-size lookup, one op-name helper, one "under MPI" test, one graph protocol."""
    # Kahn's loop (a heap of ready nodes); phased.py is a list-scheduling simulator, not a sort
    assert _homes(r"indeg\[\w+\] == 0|missing\[\w+\] == 0", "heapq") == [
        "graph/core.py",
        "partition/phased.py",
    ]
    # relinking a block (detach, insert in a new order); partition/rewriter.py only inserts
    # new ops at one place
    assert _homes(r"\.detach_op\(|\.insert_ops_before\(") == [
        "graph/rewrite.py",
        "partition/rewriter.py",
    ]
    assert _homes(r"def module_world_size\(") == ["dialects/comm.py"]  # nearest declaring op
    # reading the attribute's value: only there (dialects/checks.py validates it)
    assert _homes(r"attributes\.get\((WORLD_SIZE_ATTR|attrs\.WORLD_SIZE)\)") == [
        "dialects/checks.py",
        "dialects/comm.py",
    ]
    assert _homes(r'"builtin\.unregistered"|op_name\.data if isinstance\(op, UnregisteredOp\)') == [
        "support/locations.py"
    ]
    assert _homes(r"PMI_SIZE|OMPI_COMM_WORLD_SIZE") == ["support/launcher.py"]
    assert _homes(r"def (in_mpi_job|under_mpi\w*)\(") == ["support/launcher.py"]
    assert _homes(r"class \w+\(Protocol\):\n(\s+\"\"\"[^\"]*\"\"\"\n)?\s+preds:") == [
        "graph/core.py"
    ]
    # the plain graph types: DataflowGraph (a block of IR) and Problem (plain data)
    assert _homes(r"\nclass (TaskGraph|Problem|DataflowGraph)\b") == [
        "graph/core.py",
        "graph/dataflow.py",
    ]


def test_summary_is_typed() -> None:
    g = Problem.from_edges(3, [(0, 1), (1, 2)], comm=[1])
    durations = [3.0, 5.0, 2.0]
    summary = summarize(g, durations, evaluate_fixed_order(g, durations))
    assert isinstance(summary, TimelineSummary)
    assert (summary.makespan_us, summary.exposed_comm_us, summary.num_collectives) == (10.0, 5.0, 1)
    assert summary.as_dict()["compute_us"] == 5.0


def test_descendant_bitsets_store_no_low_zero_bits() -> None:
    """`descendant_bits` gives each set as a `Bitsets` entry, equal to the plain int (bit j =
    node j) but stored without the zero bits below its lowest node: on a chain 0 -> 1 -> ...
    -> 99, node 98's descendants are {99}, one word, not a 100-bit int."""
    import sys

    from lancet_mlir.graph.reach import Bitsets

    n = 100
    preds = [[i - 1] if i else [] for i in range(n)]
    succs = [[i + 1] if i < n - 1 else [] for i in range(n)]
    desc = descendant_bits(succs, list(range(n)))
    assert isinstance(desc, Bitsets)
    assert desc[98] == 1 << 99
    assert desc[0] == ((1 << n) - 1) ^ 1
    assert desc[n - 1] == 0
    assert list(desc) == [((1 << n) - 1) >> (i + 1) << (i + 1) for i in range(n)]
    assert desc[-1] == 0
    assert desc[97:99] == [desc[97], desc[98]]
    assert desc == Bitsets(list(desc))
    assert desc == list(desc)
    assert sys.getsizeof(desc._high[98]) < sys.getsizeof(1 << 99)
    assert ancestor_bits(preds, list(range(n)))[99] == (1 << 99) - 1
