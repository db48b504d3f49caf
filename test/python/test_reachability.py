"""`graph/reach.Reachability` (descendant sets only; ancestor questions answered from them)
against a brute-force graph search on random DAGs numbered in a random order, not a
topological one; and what the optimizers compute from it (dW labels, gap filling) against
their definitions, by brute force."""

from __future__ import annotations

from helpers import closure
from hypothesis import given, settings
from hypothesis import strategies as st

from lancet_mlir.graph.core import Problem, topological_order
from lancet_mlir.graph.reach import (
    Reachability,
    ancestor_bits_among,
    bits_of,
    descendant_bits_among,
)
from lancet_mlir.optimize.chains import reachability
from lancet_mlir.optimize.dw import fill_allreduce_gaps, label_dw


@st.composite
def shuffled_edges(draw: st.DrawFn, max_nodes: int = 14) -> tuple[int, list[tuple[int, int]]]:
    """(node count, edges) of a random DAG whose node numbers are a random permutation of a
    topological numbering, so a producer's number may be above its consumer's."""
    n = draw(st.integers(0, max_nodes))
    label = draw(st.permutations(range(n)))
    edges = [
        (label[i], label[j]) for j in range(n) for i in range(j) if draw(st.integers(0, 2)) == 0
    ]
    return n, edges


def _lists(n: int, edges: list[tuple[int, int]]) -> tuple[list[list[int]], list[list[int]]]:
    preds: list[list[int]] = [[] for _ in range(n)]
    succs: list[list[int]] = [[] for _ in range(n)]
    for p, c in edges:
        preds[c].append(p)
        succs[p].append(c)
    return [sorted(x) for x in preds], [sorted(x) for x in succs]


def test_reachability_hand_computed() -> None:
    """3 -> 1 -> 2 and 3 -> 0 -> 2 (numbered against the edges), 4 alone."""
    preds, succs = _lists(5, [(3, 1), (3, 0), (1, 2), (0, 2)])
    reach = Reachability(preds, succs, topological_order(preds, succs))
    assert len(reach) == 5
    pairs = [(u, v) for u in range(5) for v in range(5) if reach.reaches(u, v)]
    # not 2 -> 3 (against the edges), 1 -> 0 or 0 -> 1 (the two branches), 3 -> 3, or 4
    assert pairs == [(0, 2), (1, 2), (3, 0), (3, 1), (3, 2)]
    assert reach.descendants[3] == 0b00111  # 0, 1, 2
    assert reach.descendants[2] == 0
    assert reach.ancestors(2) == 0b01011  # 0, 1, 3
    assert reach.ancestors(0) == 0b01000
    assert [reach.ancestors(3), reach.ancestors(4)] == [0, 0]
    members = [2, 3, 1]
    # bit k: members[k] reaches the node
    assert reach.ancestors_among(members) == [0b010, 0b010, 0b110, 0, 0]
    # bit k: the node reaches members[k]
    assert reach.descendants_among(members) == [0b001, 0b001, 0, 0b101, 0]


@settings(max_examples=200, deadline=None)
@given(shuffled_edges(), st.data())
def test_reachability_matches_graph_search(
    graph: tuple[int, list[tuple[int, int]]], data: st.DataObject
) -> None:
    n, edges = graph
    preds, succs = _lists(n, edges)
    order = topological_order(preds, succs)
    reach = Reachability(preds, succs, order)
    down = [closure(succs, v) for v in range(n)]
    for u in range(n):
        assert set(bits_of(reach.descendants[u])) == down[u]
        assert set(bits_of(reach.ancestors(u))) == closure(preds, u)
        for v in range(n):
            assert reach.reaches(u, v) == (v in down[u])
    members = data.draw(st.lists(st.integers(0, n - 1), unique=True) if n else st.just([]))
    among_anc = reach.ancestors_among(members)
    among_desc = reach.descendants_among(members)
    assert among_anc == ancestor_bits_among(preds, order, members)
    assert among_desc == descendant_bits_among(succs, order, members)
    for v in range(n):
        assert among_anc[v] == sum(1 << k for k, m in enumerate(members) if v in down[m])
        assert among_desc[v] == sum(1 << k for k, m in enumerate(members) if m in down[v])
    problem = Problem(preds, succs, [None] * n, [1.0] * n)
    assert reachability(problem).descendants == reach.descendants


@st.composite
def dw_problems(draw: st.DrawFn) -> tuple[Problem, list[int]]:
    """A random problem of compute ops, all-to-alls and all-reduces, numbered as
    `shuffled_edges`, with a random topological launch order."""
    n, edges = draw(shuffled_edges(max_nodes=12))
    kinds = draw(st.lists(st.sampled_from(["c", "c", "a2a", "ar"]), min_size=n, max_size=n))
    comm = {v: {"a2a": "all_to_all", "ar": "allreduce"}[k] for v, k in enumerate(kinds) if k != "c"}
    durations = [draw(st.integers(0, 9)) * 1.0 for _ in range(n)]
    p = Problem.from_edges(durations, edges, comm)
    key = draw(st.permutations(range(n)))
    return p, topological_order(p.preds, p.succs, key)


@settings(max_examples=200, deadline=None)
@given(dw_problems())
def test_dw_labels_match_their_definition(case: tuple[Problem, list[int]]) -> None:
    """lancet-algorithms.md §6.2: a candidate is an eligible compute op unordered with an
    all-to-all (neither reaches the other); its windows in launch order, the candidates keyed
    in the order a scan of the windows meets them; `dw_preds`: the candidates reaching it."""
    p, launch = case
    labels = label_dw(p, launch)
    down = [closure(p.succs, v) for v in range(len(p))]
    windows = [v for v in launch if p.is_a2a(v)]
    assert labels.windows == windows
    eligible = [
        v
        for v in range(len(p))
        if p.is_compute(v) and not labels.updates >> v & 1 and p.role[v] is None
    ]
    expected: dict[int, list[int]] = {}
    for w, a in enumerate(windows):
        for d in eligible:
            if a not in down[d] and d not in down[a]:
                expected.setdefault(d, []).append(w)
    assert list(labels.overlappable.items()) == list(expected.items())
    assert labels.candidates == sorted(expected, key=launch.index)
    assert list(labels.dw_preds.items()) == [
        (d, sorted(c for c in labels.candidates if d in down[c])) for d in labels.candidates
    ]


@settings(max_examples=200, deadline=None)
@given(dw_problems())
def test_gap_filling_never_puts_a_filler_before_what_it_needs(
    case: tuple[Problem, list[int]],
) -> None:
    """An all-reduce filled into the gap before the collective at k of the fixed chain
    depends on none of the fixed chain from k on (the module docstring of `optimize.dw`);
    each filler appears once, the fixed chain keeps its order."""
    p, launch = case
    compute = [v for v in launch if p.is_compute(v)]
    fillers = [v for v in launch if p.is_allreduce(v)]
    fixed = [v for v in launch if p.is_a2a(v)]
    down = [closure(p.succs, v) for v in range(len(p))]
    # fillers that feed the compute chain are outside what the function accepts
    if any(c in down[f] for f in fillers for c in compute + fixed):
        return
    out = fill_allreduce_gaps(p, [compute, fixed], fillers)
    assert sorted(out) == sorted(fixed + fillers)
    assert [v for v in out if v in fixed] == fixed
    placed = 0
    for v in out:
        if v in fixed:
            placed += 1
        elif placed < len(fixed):  # in the gap before fixed[placed]
            assert not any(v in down[c] for c in fixed[placed:])
