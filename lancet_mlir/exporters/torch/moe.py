"""Expert-parallel MoE partitioning on FX graphs: split each all-to-all pair and the expert
computation between them into n parts along the capacity axis, as real ATen ops. The count
is one n for every pair, or per pair from the partition library's plan (`plan.plan_moe`),
whose axis for each pair `partition_graph` checks against the one inferred here.

The pattern: an all-to-all with even splits (the dispatch, or in the backward the combine's
gradient), the ops between it and the next all-to-all that reads them (the expert FFN, or its
backward), and that all-to-all (the combine, or the dispatch's gradient). Forward and
backward pairs are found alike.

The split axis is inferred, not assumed: the exchanged rows are `[ranks, ..., c]` with the
axis c innermost within each rank's chunk, and c is the largest factor of the chunk that
every op of the span keeps as one block of one dimension (`Desc`; reshapes move it between
dimensions, transposes carry it, batched matmuls keep it in their batch or row dimension,
element-wise ops on equal shapes keep it). A capacity gate's `[ranks, local experts,
capacity, d]` layout gives the capacity axis. Parts need not be equal (the first c mod n
parts get one slot more).

The rewrite, for n parts: the first all-to-all's input is sliced along the axis into n
inputs, each sent by its own `all_to_all_single`; the span's ops run once per part on
shapes with the axis shrunk; each part's result goes back by its own all-to-all; the parts
are concatenated where the full tensor is read (the second all-to-all's result, activations
the backward reads, inputs of weight gradients). A tensor already split the same way by an
earlier pair (a forward activation the backward reads) is reused per part, not re-sliced.
The parts are emitted in Tutel's pipeline order (every part's dispatch, then per part its
experts and its combine); the scheduler then reorders them.

Values: slicing and concatenation are exact and every op of a span is row-local, so the
partitioned step computes the same values up to the matmul kernels' blocking of fewer rows
(and weight gradients, outside the span, read the concatenated tensors: no sum is split).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch.fx import Graph, GraphModule, Node

from lancet_mlir.importers.torch import is_wait
from lancet_mlir.importers.torch.collectives import functional_name
from lancet_mlir.partition.blocks import Desc, reshaped
from lancet_mlir.support.errors import UserError

aten = torch.ops.aten
_C10D = torch.ops._c10d_functional


def _shape(node: Node) -> list[int]:
    return [int(s) for s in node.meta["val"].shape]


_reshaped = reshaped


_SAME = frozenset({"clone", "detach", "alias", "gelu", "relu", "silu", "neg", "tanh",
                   "gelu_backward", "threshold_backward", "silu_backward", "mul", "add",
                   "sub", "div"})  # fmt: skip
_RESHAPE = frozenset({"view", "_unsafe_view", "reshape"})


def _name(node: Node) -> str:
    packet = getattr(node.target, "overloadpacket", None)
    return getattr(packet, "__name__", "")


def _tensor_args(node: Node) -> list[Node]:
    return [a for a in node.args if isinstance(a, Node)]


def _propagate(node: Node, descs: Mapping[Node, Desc]) -> Desc | None:
    """The axis of `node`'s result from its inputs' (None: the op cannot be split so)."""
    name = _name(node)
    ins = _tensor_args(node)
    known = [descs.get(i) for i in ins]
    first = known[0] if known else None
    if name in _RESHAPE and first is not None:
        return _reshaped(first, _shape(ins[0]), _shape(node))
    if name == "transpose" and first is not None:
        rank = len(_shape(ins[0]))
        a, b = (int(x) % rank for x in node.args[1:3])  # type: ignore[arg-type]
        dim = b if first.dim == a else a if first.dim == b else first.dim
        return Desc(dim, first.size, first.inner)
    if name == "permute" and first is not None:
        dims = [int(d) % len(_shape(ins[0])) for d in node.args[1]]  # type: ignore[union-attr]
        return Desc(dims.index(first.dim), first.size, first.inner)
    if name in _SAME:
        out = _shape(node)
        split = [d for d in known if d is not None]
        if not split or any(d != split[0] for d in split):
            return None
        if any(_shape(i) not in (out, []) for i in ins):
            return None  # broadcasting: not row-local in general
        return split[0]
    if name in ("bmm", "mm") and len(ins) == 2:
        a, b = known
        rows, cols = (1, 2) if name == "bmm" else (0, 1)
        if a is not None and b is None and a.dim == rows:
            return a
        if a is None and b is not None and b.dim == cols:
            return b
        if name == "bmm" and a is not None and a == b and a.dim == 0:
            return a
    return None


@dataclass
class Pair:
    """An all-to-all pair and the span between them, with the axis of every span node."""

    first: Node
    wait: Node
    second: Node
    span: list[Node]
    descs: dict[Node, Desc]

    @property
    def size(self) -> int:
        """Slots of the split axis."""
        return self.descs[self.wait].size


def _even(node: Node) -> bool:
    splits: list[Any] = [s for s in node.args[1:3] if s is not None]
    if not all(isinstance(s, (list, tuple)) for s in splits):
        return False
    return all(isinstance(v, int) for s in splits for v in s) and all(
        len(set(s)) == 1 for s in splits
    )


def _wait_of(node: Node) -> Node | None:
    waits = [u for u in node.users if is_wait(u)]
    return waits[0] if len(waits) == 1 and len(node.users) == 1 else None


def find_pairs(gm: GraphModule, world: int) -> list[Pair]:
    """Every all-to-all pair whose span can be split (module doc), in program order."""
    nodes = list(gm.graph.nodes)
    index = {n: i for i, n in enumerate(nodes)}
    a2a = [n for n in nodes if functional_name(n) == "all_to_all_single" and _even(n)]
    pairs: list[Pair] = []
    taken: set[Node] = set()
    for first in a2a:
        wait = _wait_of(first)
        if first in taken or wait is None:
            continue
        below = {wait}
        for node in nodes[index[wait] + 1 :]:
            if any(i in below for i in node.all_input_nodes):
                below.add(node)
        second = next((s for s in a2a if s in below and s not in taken and s is not first), None)
        if second is None or _wait_of(second) is None:
            continue
        data = second.args[0]
        assert isinstance(data, Node)
        above = {data}
        for node in reversed(nodes[: index[data]]):
            if any(u in above for u in node.users):
                above.add(node)
        span = [n for n in nodes if n in below and n in above and n is not wait]
        pair = _solve(first, wait, second, span, world)
        if pair is not None:
            pairs.append(pair)
            taken.update((first, second))
    return pairs


def _solve(first: Node, wait: Node, second: Node, span: list[Node], world: int) -> Pair | None:
    rows = _shape(wait)[0]
    if rows % world:
        return None
    chunk = rows // world
    for size in sorted((c for c in range(2, chunk + 1) if chunk % c == 0), reverse=True):
        descs = {wait: Desc(0, size, 1)}
        for node in span:
            desc = _propagate(node, descs)
            if desc is None:
                break
            descs[node] = desc
        else:
            out = descs.get(second.args[0])  # type: ignore[arg-type]
            if out is not None and out.dim == 0 and out.inner == 1 and out.size == size:
                return Pair(first, wait, second, span, descs)
    return None


def part_sizes(size: int, parts: int) -> list[int]:
    """Slots per part: the first `size mod parts` parts get one more."""
    return [size // parts + (1 if k < size % parts else 0) for k in range(parts)]


class _Rewriter:
    """Copies the graph with every pair split into parts (module doc)."""

    def __init__(
        self, gm: GraphModule, pairs: Sequence[Pair], parts: Mapping[Node, int], world: int
    ):
        self.gm = gm
        self.world = world
        self.graph = Graph()
        self.env: dict[Node, Node] = {}
        self.parts = parts
        """Part count of each pair (by its first all-to-all)."""
        self.pairs = {p.first: p for p in pairs}
        self.skip = {n for p in pairs for n in (p.wait, *p.span, p.second, _wait_of(p.second))}
        self.split: dict[Node, tuple[Desc, list[int], list[Node]]] = {}
        self.full: dict[Node, tuple[Desc, list[int], list[Node]]] = {}

    def run(self) -> GraphModule:
        for node in self.gm.graph.nodes:
            if node in self.pairs:
                pair = self.pairs[node]
                for inside in pair.span:  # what the span reads from outside, first
                    for arg in inside.all_input_nodes:
                        if arg not in self.skip:
                            self._ensure(arg)
                self._ensure(node.args[0])  # type: ignore[arg-type]
                self._pair(pair)
            elif node not in self.skip and node not in self.env:
                self.env[node] = self.graph.node_copy(node, self._get)
        self.graph.lint()
        out = GraphModule(self.gm, self.graph)
        out.recompile()
        return out

    def _ensure(self, node: Node) -> None:
        """Copy `node` (and what it needs) now unless it is there already."""
        if node in self.env or node in self.full or node in self.skip:
            return
        for arg in node.all_input_nodes:
            self._ensure(arg)
        self.env[node] = self.graph.node_copy(node, self._get)

    def _get(self, node: Node) -> Node:
        """The full value of an old node (concatenating its parts on first use)."""
        if node not in self.env:
            desc, sizes, parts = self.full.pop(node)
            self.env[node] = self._cat(parts, desc, sizes, _shape(node))
        return self.env[node]

    def _part_of(self, node: Node, desc: Desc, sizes: list[int], k: int, cache: dict) -> Node:
        known = self.split.get(node)
        if known is not None and known[0] == desc and known[1] == sizes:
            return known[2][k]
        key = (node, k)
        if key not in cache:
            cache[key] = self._slice(self._get(node), desc, sizes, k, _shape(node))
        return cache[key]

    def _pair(self, pair: Pair) -> None:
        sizes = part_sizes(pair.size, self.parts[pair.first])
        desc0 = pair.descs[pair.wait]
        data, group = pair.first.args[0], pair.first.args[3]
        assert isinstance(data, Node)
        cache: dict = {}
        local: list[dict[Node, Node]] = [{} for _ in sizes]
        for k in range(len(sizes)):  # every part's dispatch first
            part = self._slice(self._get(data), desc0, sizes, k, _shape(data))
            splits = self._splits(_part_shape(_shape(data), desc0, sizes[k]))
            sent = self.graph.call_function(
                _C10D.all_to_all_single.default, (part, splits, splits, group)
            )
            local[k][pair.wait] = self.graph.call_function(_C10D.wait_tensor.default, (sent,))
        second_wait = _wait_of(pair.second)
        assert second_wait is not None
        back = []
        for k in range(len(sizes)):
            for node in pair.span:
                local[k][node] = self._copy_part(node, pair, sizes, k, local[k], cache)
            data2 = pair.second.args[0]
            assert isinstance(data2, Node)
            splits = self._splits(_part_shape(_shape(data2), pair.descs[data2], sizes[k]))
            sent = self.graph.call_function(
                _C10D.all_to_all_single.default, (local[k][data2], splits, splits, group)
            )
            back.append(self.graph.call_function(_C10D.wait_tensor.default, (sent,)))
        for node in (pair.wait, *pair.span):
            parts = [local[k][node] for k in range(len(sizes))]
            self.split[node] = (pair.descs[node], sizes, parts)
            if any(u not in pair.span and u is not pair.second for u in node.users):
                self.full[node] = (pair.descs[node], sizes, parts)
        self.split[second_wait] = (desc0, sizes, back)
        self.full[second_wait] = (desc0, sizes, back)

    def _splits(self, shape: Sequence[int]) -> list[int]:
        return [shape[0] // self.world] * self.world

    def _copy_part(
        self, node: Node, pair: Pair, sizes: list[int], k: int, local: dict[Node, Node], cache: dict
    ) -> Node:
        desc = pair.descs[node]
        out_shape = _part_shape(_shape(node), desc, sizes[k])

        def arg(a: Node) -> Node:
            if a in local:
                return local[a]
            peer = a.meta.get("val")
            if (
                _name(node) in _SAME
                and getattr(peer, "shape", None) is not None
                and _shape(a) == _shape(node)
            ):
                return self._part_of(a, desc, sizes, k, cache)
            return self._get(a)

        args = list(torch.fx.node.map_arg(tuple(node.args), arg))  # type: ignore[arg-type]
        if _name(node) in _RESHAPE:
            args[1] = out_shape
        kwargs = dict(torch.fx.node.map_arg(dict(node.kwargs), arg))  # type: ignore[arg-type]
        return self.graph.call_function(node.target, tuple(args), kwargs)  # type: ignore[arg-type]

    def _slice(self, x: Node, desc: Desc, sizes: list[int], k: int, shape: list[int]) -> Node:
        start = sum(sizes[:k])
        g = self.graph
        view = g.call_function(aten.reshape.default, (x, _expanded(shape, desc, desc.size)))
        cut = g.call_function(aten.slice.Tensor, (view, desc.dim + 1, start, start + sizes[k]))
        dense = g.call_function(
            aten.clone.default, (cut,), {"memory_format": torch.contiguous_format}
        )
        return g.call_function(aten.view.default, (dense, _part_shape(shape, desc, sizes[k])))

    def _cat(self, parts: list[Node], desc: Desc, sizes: list[int], shape: list[int]) -> Node:
        g = self.graph
        views = [
            g.call_function(aten.reshape.default, (p, _expanded(shape, desc, s)))
            for p, s in zip(parts, sizes, strict=True)
        ]
        cat = g.call_function(aten.cat.default, (views, desc.dim + 1))
        return g.call_function(aten.reshape.default, (cat, shape))


def _expanded(shape: Sequence[int], desc: Desc, size: int) -> list[int]:
    outer = shape[desc.dim] // (desc.size * desc.inner)
    return [*shape[: desc.dim], outer, size, desc.inner, *shape[desc.dim + 1 :]]


def _part_shape(shape: Sequence[int], desc: Desc, size: int) -> list[int]:
    out = list(shape)
    out[desc.dim] = shape[desc.dim] // desc.size * size
    return out


def _fill_meta(gm: GraphModule, like: GraphModule) -> None:
    """meta['val'] on every node (fake-tensor propagation from the input's placeholders)."""
    from torch.fx.passes.fake_tensor_prop import FakeTensorProp

    vals = [n.meta["val"] for n in like.graph.nodes if n.op == "placeholder"]
    mode = next((v.fake_mode for v in vals if hasattr(v, "fake_mode")), None)
    if mode is None:
        raise UserError("partition: the graph's placeholders carry no fake tensors (use make_fx)")
    FakeTensorProp(gm, mode).propagate_dont_convert_inputs(*vals)


def partition_graph(
    gm: GraphModule,
    parts: int | Mapping[str, int],
    *,
    world_size: int,
    axes: Mapping[str, Desc] | None = None,
) -> tuple[GraphModule, int]:
    """`gm` with MoE all-to-all pairs split (module doc), and the number of pairs split.

    `parts` an int: every pair into that many parts (a pair whose axis has fewer slots is
    left whole); a mapping: the pair whose first all-to-all is the FX node of that name
    into that many parts, the others whole (a plan: `plan.plan_moe`). `axes` gives, by the
    same names, the axis the plan splits the first all-to-all's result along: a pair whose
    axis found here differs, or a named pair not found here, is refused (UserError, one
    line), so the graph realises exactly the plan."""
    found = find_pairs(gm, world_size)
    if isinstance(parts, int):
        counts = {p.first: parts for p in found if p.size >= parts}
    else:
        by_name = {p.first.name: p for p in found}
        counts = {}
        for name, n in parts.items():
            pair = by_name.get(name)
            if pair is None:
                raise UserError(
                    f"partition: the plan splits the all-to-all pair of FX node '{name}', "
                    "which the FX rewriter finds no splittable span for"
                )
            want = (axes or {}).get(name)
            have = pair.descs[pair.wait]
            if want is not None and want != have:
                raise UserError(
                    f"partition: the plan splits FX node '{name}' along {want}, the FX "
                    f"rewriter finds {have}"
                )
            if n < 2 or pair.size < n:
                raise UserError(
                    f"partition: {n} parts for FX node '{name}' (its axis has {pair.size} slots)"
                )
            counts[pair.first] = n
    pairs = [p for p in found if p.first in counts]
    if not pairs:
        return gm, 0
    new = _Rewriter(gm, pairs, counts, world_size).run()
    _fill_meta(new, gm)
    return new, len(pairs)


def partition_moe(
    gm: GraphModule, parts: str | int, *, world_size: int
) -> list[tuple[int, GraphModule]]:
    """`gm` with every pair in `parts` parts, as [(parts, graph)] (the forced count of
    `optimize(partition=n)`); a UserError when no pair can be split so or `parts` is not
    a count (`"auto"`, the library's plan, is `plan.plan_moe` + `partition_graph`)."""
    if isinstance(parts, bool) or not isinstance(parts, int):
        raise UserError(f"partition: expected 'auto', 'none' or a count, got {parts!r}")
    if parts < 2:
        raise UserError(f"partition: the part count must be >= 2, got {parts}")
    new, pairs = partition_graph(gm, parts, world_size=world_size)
    if not pairs:
        raise UserError(f"partition: no MoE all-to-all pair can be split into {parts} parts")
    return [(parts, new)]


__all__ = [
    "Desc",
    "Pair",
    "find_pairs",
    "part_sizes",
    "partition_graph",
    "partition_moe",
]
