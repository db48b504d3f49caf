"""PyTorch execution traces (ET JSON): tensor data dependencies for an imported Kineto step.

An ET lists every operator of one iteration (`nodes`: `id`, `name`, `parent`, `inputs`,
`outputs`); a tensor argument is `[tensor id, storage id, offset, numel, itemsize, device]`.
Its operators are matched to the `cpu_op`s of the replayed step (`ProfilerStep#N`: the ops that
start within its window, on any thread) by name and occurrence order (the ET's `rf_id` and
Kineto's `External id` do not line up in real traces; reference/trace-notes.md): an ET records one
iteration, and matching from the start of a trace of several steps would put its edges on an
earlier step. An ET whose operators do not line up with the step's (`match_share` below
`MATCH_THRESHOLD`: another program's or run's ET) is refused, and so is one none of whose
operators launches GPU work of step N.
A GPU op then depends on the last GPU op (per stream) launched by the operator that last wrote
a storage its operator reads (read after write), and, when its operator writes a storage, on the
last GPU ops of each operator that read that storage since its previous write (write after read:
an in-place `add_` on a weight after the matmul that read it) and of that previous writer (write
after write); views share their storage, and operators that launch nothing are neither readers
nor writers. One pass in ET order, each storage keeping its last writer and its readers since
(O(reads + writes) edges per pair of streams). An edge is kept only if the measured times
satisfy it.

An ET does not state its rank in its header; its `record_param_comms` nodes do (`et_rank`). An ET
whose collectives name a rank other than the one the Kineto trace's `distributedInfo` states is
refused.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lancet_mlir.importers.traces.kineto import RawTrace, Span
from lancet_mlir.importers.traces.step import StepTrace, select_step
from lancet_mlir.support.errors import UserError


@dataclass
class EtNode:
    """One ET operator."""

    id: int
    name: str
    parent: int
    inputs: list[int]
    outputs: list[int]
    """Storage ids read / written."""


def _storages(values: Any) -> list[int]:
    out: list[int] = []
    if not isinstance(values, list):
        return out
    for v in values:
        if isinstance(v, list) and len(v) == 6 and all(isinstance(x, int) for x in v[:5]):
            out.append(v[1])
        elif isinstance(v, list):  # a list of tensors (TensorList)
            out.extend(_storages(v))
    return out


def is_pytorch_et(doc: Any) -> bool:
    """Whether `doc` looks like a PyTorch execution trace."""
    return isinstance(doc, dict) and isinstance(doc.get("nodes"), list) and "schema" in doc


def parse_et(doc: Any, source: str) -> list[EtNode]:
    """The ET's operators in id order; UserError if it is not one."""
    if not is_pytorch_et(doc):
        raise UserError(f"{source}: not a PyTorch execution trace (no 'schema' and 'nodes')")
    nodes = []
    for n in doc["nodes"]:
        if not isinstance(n, dict) or not isinstance(n.get("id"), int):
            raise UserError(f"{source}: an ET node without an integer 'id'")
        nodes.append(
            EtNode(
                n["id"],
                str(n.get("name", "")),
                n.get("parent", -1) if isinstance(n.get("parent"), int) else -1,
                _storages(n.get("inputs")),
                _storages(n.get("outputs")),
            )
        )
    nodes.sort(key=lambda n: n.id)
    return nodes


def _rank_of_comms(node: dict[str, Any]) -> tuple[int, bool] | None:
    """(rank, global) recorded by one `record_param_comms` node, None if it records none.

    PyTorch's RECORD_PARAM_COMMS passes `seq, pg (id, pointer, name or (name, desc)), rank,
    collective name, in splits, out splits[, global rank start, global rank stride, world size]`
    (RECORD_PARAM_COMMS_DATA puts the input tensors first): the rank is the `Int` just before the
    collective name, the first `String` from the fourth input on. It is the rank within the
    collective's group; with the start and stride (`stride >= 1`) it gives the global rank, and
    without them (older PyTorch) it is the global rank only for the world group (`global` False)."""
    values, types = node.get("inputs"), node.get("input_types")
    if not isinstance(values, list) or not isinstance(types, list) or len(types) != len(values):
        return None
    for k in range(3, len(values)):
        if types[k] == "String" and types[k - 1] == "Int":
            rank = values[k - 1]
            if isinstance(rank, bool) or not isinstance(rank, int):
                return None
            if len(values) >= k + 5 and types[k + 3] == "Int" and types[k + 4] == "Int":
                start, stride = values[k + 3], values[k + 4]
                if isinstance(start, int) and isinstance(stride, int) and stride >= 1:
                    return start + rank * stride, True
                return None  # a group that is not strided: its global ranks are unknown
            return rank, False
    return None


def et_rank(doc: Any) -> int | None:
    """The rank the ET was recorded on, from its `record_param_comms` nodes; None if they do not
    tell (no collective, or group ranks that disagree and no global rank)."""
    seen: dict[bool, set[int]] = {True: set(), False: set()}
    for n in doc.get("nodes", []) if isinstance(doc, dict) else []:
        if isinstance(n, dict) and n.get("name") == "record_param_comms":
            got = _rank_of_comms(n)
            if got is not None:
                seen[got[1]].add(got[0])
    ranks = seen[True] or seen[False]
    return next(iter(ranks)) if len(ranks) == 1 else None


MATCH_THRESHOLD = 0.8
"""Least `match_share` an ET must reach to be used with a Kineto step. Measured: the real
DLRM pair (param's ET with any of the 8 ranks' Kineto traces) 0.973-0.976 (its 42 unmatched
ET nodes are operators the profiler did not record as `cpu_op`s), the hand-written pairs of
test/data/traces 1.0; another program's ET 0.5 on the tiny pairs (two_steps with
whatif_scale's ET and the reverse), 0.75 for whatif_scale with an ET whose first two
operators differ, and 0.001-0.002 between DLRM and a tiny trace. 0.8 sits in the gap
(docs/formats.md "Profiler traces")."""
_ROOT_PREFIX = "[pytorch|profiler|execution_"
"""The ET's per-thread root nodes (`[pytorch|profiler|execution_trace|thread]`, older
`execution_graph`): they are no ATen op, so the Kineto trace has nothing to match them."""


def _longest_increasing(values: list[int]) -> int:
    """Length of the longest strictly increasing subsequence of `values` (patience sort)."""
    import bisect

    tails: list[int] = []
    for v in values:
        k = bisect.bisect_left(tails, v)
        if k == len(tails):
            tails.append(v)
        else:
            tails[k] = v
    return len(tails)


def match_share(nodes: list[EtNode], cpu: list[Span], span_of: dict[int, Span]) -> float:
    """How well the ET's operators line up with the step's ATen ops (`cpu`, by start):
    the most name/occurrence matches (`span_of`) that keep one order in both (ET id order,
    Kineto start order), over the larger of the two op counts (the ET's without its root
    nodes). 1.0: the same op sequence. Common names (`aten::mm`) match across programs, so
    counting matches alone accepts another program's ET; the order and the larger count
    do not: an ET of 1,673 ops for a step of 4 scores 0.002."""
    ops = [n for n in nodes if not n.name.startswith(_ROOT_PREFIX)]
    if not ops or not cpu:
        return 0.0
    pos = {id(s): k for k, s in enumerate(cpu)}
    seq = [pos[id(span_of[n.id])] for n in ops if n.id in span_of]
    return _longest_increasing(seq) / max(len(ops), len(cpu))


def add_data_dependencies(
    st: StepTrace,
    raw: RawTrace,
    nodes: list[EtNode],
    tol: float = 1.0,
    et_source: str = "the execution trace",
    et_rank: int | None = None,
) -> int:
    """Add the ET's data dependencies to step N of `st` (GpuOp.deps); returns how many were
    kept. UserError if the ET was recorded on another rank (`et_rank`, when the Kineto trace
    states its rank) or none of its operators launches GPU work of step N."""
    if et_rank is not None and raw.rank_known and et_rank != raw.rank:
        raise UserError(
            f"{et_source}: an execution trace of rank {et_rank} (its collectives say so), "
            f"given for {st.source}, rank {raw.rank}"
        )
    _, lo, dur, _ = select_step(raw, st.step)
    # only the replayed step's ATen ops: the ET records one iteration (module doc)
    cpu = [s for s in raw.spans if s.cat == "cpu_op" and lo <= s.ts < lo + dur]
    by_name: dict[str, list[Span]] = {}
    for s in cpu:
        by_name.setdefault(s.name, []).append(s)
    seen: dict[str, int] = {}
    span_of: dict[int, Span] = {}
    for n in nodes:
        k = seen.get(n.name, 0)
        seen[n.name] = k + 1
        spans = by_name.get(n.name)
        if spans is not None and k < len(spans):
            span_of[n.id] = spans[k]
    share = match_share(nodes, cpu, span_of)
    if share < MATCH_THRESHOLD:
        raise UserError(
            f"{et_source}: does not match ProfilerStep#{st.step} of {st.source}: "
            f"{100 * share:.1f} % of their ops line up by name and order (least "
            f"{100 * MATCH_THRESHOLD:.0f} %): an execution trace of another program or run?"
        )
    st.et_match = share
    target = set(st.target)
    launching = {id(inf.cpu_op) for j, inf in enumerate(st.info) if j in target and inf.cpu_op}
    if not any(id(span) in launching for span in span_of.values()):
        raise UserError(
            f"{et_source}: no operator of the execution trace matches an ATen op of "
            f"ProfilerStep#{st.step} of {st.source} that launches GPU work"
        )
    ops = st.graph.ops
    ops_of_span: dict[int, list[int]] = {}
    for j, inf in enumerate(st.info):
        if inf.cpu_op is not None:
            ops_of_span.setdefault(id(inf.cpu_op), []).append(j)
    own: dict[int, list[int]] = {
        n.id: ops_of_span.get(id(span_of[n.id]), []) if n.id in span_of else [] for n in nodes
    }
    parent = {n.id: n.parent for n in nodes}
    subtree: dict[int, list[int]] = {n.id: list(own[n.id]) for n in nodes}
    for n in nodes:
        if own[n.id]:
            p = parent.get(n.id, -1)
            visited = {n.id}
            while p in subtree and p not in visited:  # a root may name itself as its parent
                visited.add(p)
                subtree[p].extend(own[n.id])
                p = parent.get(p, -1)
    # per storage: its last writer and the operators that read it since (module doc: one
    # pass, each read recorded once and turned into at most one edge per later writer)
    writer: dict[int, int] = {}
    readers: dict[int, list[int]] = {}
    kept = 0

    def link(src_node: int, dst_firsts: list[int]) -> None:
        """Edges from the last GPU op `src_node` launched (with its callees) on each stream
        to each stream's first op of the current operator, kept where the measured times
        satisfy them. Per stream: an operator that launches on two (a collective's copies
        and its NCCL kernel) has finished with a storage only when both are done."""
        nonlocal kept
        last: dict[int, int] = {}
        for j in sorted(subtree[src_node], key=lambda j: (st.info[j].launch_ts, j)):
            last[ops[j].stream] = j
        for src in sorted(last.values(), key=lambda j: (st.info[j].launch_ts, j)):
            for dst in dst_firsts:
                if (
                    src == dst
                    or src in ops[dst].deps
                    or st.info[src].launch_ts > st.info[dst].launch_ts
                ):
                    continue  # itself, already an edge, or its own callee / ancestor's later op
                if ops[dst].ts + tol >= ops[src].ts + ops[src].dur:
                    ops[dst].deps.append(src)
                    kept += 1

    for n in nodes:
        mine = own[n.id]
        if mine:
            first_per_stream: dict[int, int] = {}
            for j in sorted(mine, key=lambda j: (st.info[j].launch_ts, j)):
                first_per_stream.setdefault(ops[j].stream, j)
            firsts = list(first_per_stream.values())
            # sources in a fixed order (a set of ints iterates alike in every run)
            srcs: dict[int, None] = {}
            for s in set(n.inputs):  # read after write
                w = writer.get(s)
                if w is not None and w != n.id:
                    srcs.setdefault(w, None)
            for s in n.outputs:
                # write after read: an in-place op (`add_` on a weight) waits for the ops
                # that read the old value; write after write: for the previous writer
                for r in readers.get(s, ()):
                    if r != n.id:
                        srcs.setdefault(r, None)
                w = writer.get(s)
                if w is not None and w != n.id:
                    srcs.setdefault(w, None)
            for src_node in srcs:
                link(src_node, firsts)
        if subtree[n.id]:
            for s in n.inputs:
                seen_by = readers.setdefault(s, [])
                if not seen_by or seen_by[-1] != n.id:
                    seen_by.append(n.id)
            for s in n.outputs:
                writer[s] = n.id
                readers[s] = []  # later writers order after this write (WAW), not its readers
    st.data_deps += kept
    return kept
