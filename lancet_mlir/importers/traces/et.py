"""PyTorch execution traces (ET JSON): tensor data dependencies for an imported Kineto step.

An ET lists every operator of one iteration (`nodes`: `id`, `name`, `parent`, `inputs`,
`outputs`); a tensor argument is `[tensor id, storage id, offset, numel, itemsize, device]`.
Its operators are matched to the Kineto trace's `cpu_op`s by name and occurrence order (the
ET's `rf_id` and Kineto's `External id` do not line up in real traces; reference/trace-notes.md).
A GPU op then depends on the last GPU op launched by the operator that last wrote a storage its
operator reads (views share their storage; operators that launch nothing never count as
writers). An edge is kept only if the measured times satisfy it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lancet_mlir.importers.traces.kineto import RawTrace, Span
from lancet_mlir.importers.traces.step import StepTrace
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


def add_data_dependencies(
    st: StepTrace, raw: RawTrace, nodes: list[EtNode], tol: float = 1.0
) -> int:
    """Add the ET's data dependencies to `st` (GpuOp.deps); returns how many were kept."""
    cpu = [s for s in raw.spans if s.cat == "cpu_op"]
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
    if not span_of:
        raise UserError(
            f"{st.source}: no operator of the execution trace matches a cpu_op of the trace"
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
    writer: dict[int, int] = {}
    kept = 0
    for n in nodes:
        mine = own[n.id]
        if mine:
            first_per_stream: dict[int, int] = {}
            for j in sorted(mine, key=lambda j: (st.info[j].launch_ts, j)):
                first_per_stream.setdefault(ops[j].stream, j)
            for s in set(n.inputs):
                w = writer.get(s)
                if w is None or w == n.id:
                    continue
                src = max(subtree[w], key=lambda j: (st.info[j].launch_ts, j))
                for dst in first_per_stream.values():
                    if (
                        src == dst
                        or src in ops[dst].deps
                        or st.info[src].launch_ts > st.info[dst].launch_ts
                    ):
                        continue
                    if ops[dst].ts + tol >= ops[src].ts + ops[src].dur:
                        ops[dst].deps.append(src)
                        kept += 1
        if subtree[n.id]:
            for s in n.outputs:
                writer[s] = n.id
    st.data_deps += kept
    return kept
