"""Roles of the nodes of a captured training step: `fwd`, `dx`, `dw`, `update`.

make_fx records no forward/backward marker, so the roles come from the graph's shape:

* the backward starts at the loss gradient's seed (the first `ones_like` / `full_like` /
  `new_ones` node: what `torch.autograd.grad` creates); everything it does not reach is `fwd`;
* each output of the step (a new parameter, an optimizer state) owns the backward nodes that
  only it needs: its gradient's own computation; a backward node that two or more outputs
  need is `dx` (the activations' gradients every weight gradient reads);
* of an output's own nodes, its gradient is the first whose shape is the output's and
  which needs every collective of those nodes (the gradient's all-reduce is on the way to
  it, and a backward all-to-all of an expert's gradient): it and the nodes it needs are
  `dw`, the nodes after it `update`. Needing the collectives matters: an activation
  gradient that happens to have the weight's shape comes before the exchanges that lead to
  the real gradient, and calling what follows it `update` would put body work (an
  all-to-all's input) after the body (an outside review). With no such node, the first of
  the output's shape (or the last own node) is taken, and a collective stays `dw`. So
  every `dw` node reaches an `update` node.

A graph with no seed (a forward-only graph) is all `fwd`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from torch.fx import Graph, Node

from lancet_mlir.dialects.vocab import Role

SEEDS = frozenset({"ones_like", "full_like", "new_ones"})


def _seed(nodes: Sequence[Node]) -> Node | None:
    for node in nodes:
        packet = getattr(node.target, "overloadpacket", None)
        if node.op == "call_function" and packet is not None and packet.__name__ in SEEDS:
            return node
    return None


def _shape(node: Node) -> tuple | None:
    val = node.meta.get("val")
    shape = getattr(val, "shape", None)
    return None if shape is None else tuple(shape)


def infer_roles(graph: Graph, is_collective: Callable[[Node], bool]) -> dict[Node, Role]:
    """The role of every `call_function` node of `graph` (module doc)."""
    nodes = list(graph.nodes)
    calls = [n for n in nodes if n.op == "call_function"]
    seed = _seed(calls)
    if seed is None:
        return {n: Role.FWD for n in calls}
    backward: set[Node] = {seed}
    for node in nodes[nodes.index(seed) + 1 :]:
        if any(i in backward for i in node.all_input_nodes):
            backward.add(node)
    output = next(n for n in reversed(nodes) if n.op == "output")
    outs = output.all_input_nodes
    needed_by: dict[Node, int] = {}  # bit mask of the outputs a node is needed by
    for bit, out in enumerate(outs):
        needed_by[out] = needed_by.get(out, 0) | (1 << bit)
    for node in reversed(nodes):
        mask = needed_by.get(node, 0)
        for user in node.users:
            mask |= needed_by.get(user, 0)
        needed_by[node] = mask
    roles: dict[Node, Role] = {n: Role.FWD for n in calls if n not in backward}
    own: dict[int, list[Node]] = {}
    for node in calls:
        if node in backward:
            mask = needed_by.get(node, 0)
            if mask and not mask & (mask - 1):
                own.setdefault(mask.bit_length() - 1, []).append(node)
            else:
                roles[node] = Role.DX
    for bit, members in own.items():
        target = _shape(outs[bit])
        shaped = [n for n in members if _shape(n) == target]
        collectives = {n for n in members if is_collective(n)}
        grad, needs = None, set()
        for candidate in shaped:
            needs = _needs(candidate, members)
            if collectives <= needs:
                grad = candidate
                break
        if grad is None:
            grad = shaped[0] if shaped else members[-1]
            needs = _needs(grad, members)
        for node in members:
            roles[node] = Role.DW if node in needs or is_collective(node) else Role.UPDATE
    return roles


def _needs(grad: Node, members: Sequence[Node]) -> set[Node]:
    """`grad` and the nodes of `members` (in graph order) it needs."""
    needs = {grad}
    for node in reversed(members):
        if node in needs:
            needs.update(node.all_input_nodes)
    return needs
