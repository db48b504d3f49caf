"""Which FX nodes must keep their program order: in-place writes and random draws.

A `make_fx` graph is not functionalized: `buf.copy_(x)`, `w.sub_(g)` and dropout's
`bernoulli_` mutate a tensor (and every view of it) where they stand, and each random op
draws from the one RNG state in program order. Data edges alone let a scheduler move a read
of the old value after the write, or two draws past each other (both change the values the
step computes). So every node gets the resources it reads and writes (`attrs.EFFECTS`, which
every pass's dataflow graph orders per resource, graph/dataflow.py):

* **storages**: the nodes whose results may share memory form one class: a result whose
  schema return is an alias (`Tensor(a)`: views, `detach`, an in-place op's own result, the
  elements of `split`'s `Tensor(a)[]`) joins the arguments with an alias annotation,
  `a.set_(src)` joins `src` too (its schema does not say `a` takes `src`'s memory), a
  `getitem` joins its source, a collective's wait joins the collective. A class some node
  writes (a `Tensor(a!)` argument) is a resource `s<k>` (k numbers the written classes in
  program order): the writers write it, every other node with an input in it reads it.
* **the RNG state** `rng`: every node whose overload is tagged `nondeterministic_seeded`
  (`bernoulli_`, `native_dropout`, `rand`, `randn`, ...) writes it.

Nodes of a class nobody writes and deterministic nodes get nothing: their order is free.
"""

from __future__ import annotations

import operator
from collections.abc import Callable

import torch
from torch.fx import Graph, Node

RNG = "rng"
"""The RNG state's resource."""


def node_effects(graph: Graph, is_wait: Callable[[Node], bool]) -> dict[Node, list[str]]:
    """`lancet.effects` entries (`read:<resource>` / `write:<resource>`, sorted) of every
    node that has any (module doc); `is_wait` tells a collective's wait node."""
    nodes = [n for n in graph.nodes if n.op != "output"]
    parent: dict[Node, Node] = {n: n for n in nodes}

    def find(n: Node) -> Node:
        while parent[n] is not n:
            parent[n] = parent[parent[n]]
            n = parent[n]
        return n

    def join(a: Node, b: Node) -> None:
        ra, rb = find(a), find(b)
        if ra is not rb:
            parent[rb] = ra

    written: dict[Node, list[Node]] = {}  # node -> the argument nodes it writes
    seeded: list[Node] = []
    for node in nodes:
        if node.op != "call_function":
            continue
        if node.target is operator.getitem or is_wait(node):
            source = node.args[0]
            if isinstance(source, Node) and source in parent:
                join(node, source)
            continue
        schema = getattr(node.target, "_schema", None)
        if schema is None:
            continue
        aliased, writes = _aliased_arguments(node, schema)
        if any(r.alias_info is not None for r in schema.returns):
            for arg in aliased:
                join(node, arg)
        if schema.name == "aten::set_":  # `a.set_(src)`: a now shares src's memory
            for arg in _nodes_in(list(node.args) + list(node.kwargs.values())):
                if arg in parent:
                    join(node, arg)
        if writes:
            written[node] = writes
        tags = getattr(node.target, "tags", ())
        if torch.Tag.nondeterministic_seeded in tags:
            seeded.append(node)
    resources: dict[Node, str] = {}  # class root -> resource name
    for node in nodes:  # numbered in program order: deterministic names
        for arg in written.get(node, ()):
            resources.setdefault(find(arg), f"s{len(resources)}")
    effects: dict[Node, set[str]] = {}
    for node, args in written.items():
        for arg in args:
            effects.setdefault(node, set()).add(f"write:{resources[find(arg)]}")
    for node in seeded:
        effects.setdefault(node, set()).add(f"write:{RNG}")
    for node in nodes:
        for arg in node.all_input_nodes:
            name = resources.get(find(arg)) if arg in parent else None
            if name is not None and f"write:{name}" not in effects.get(node, ()):
                effects.setdefault(node, set()).add(f"read:{name}")
    return {node: sorted(found) for node, found in effects.items()}


def _aliased_arguments(node: Node, schema: torch.FunctionSchema) -> tuple[list[Node], list[Node]]:
    """The argument nodes with an alias annotation, and those of them written (`Tensor(a!)`)."""
    aliased: list[Node] = []
    writes: list[Node] = []
    for k, arg in enumerate(schema.arguments):
        if arg.alias_info is None:
            continue
        if k < len(node.args):
            value = node.args[k]
        else:
            value = node.kwargs.get(arg.name)
        for source in _nodes_in(value):
            aliased.append(source)
            if arg.alias_info.is_write:
                writes.append(source)
    return aliased, writes


def _nodes_in(value: object) -> list[Node]:
    if isinstance(value, Node):
        return [value]
    if isinstance(value, (list, tuple)):
        return [n for v in value for n in _nodes_in(v)]
    return []
