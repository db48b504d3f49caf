"""Reachability on plain DAGs as Python-int bitsets (bit j set = node j), one OR per edge on
V-bit integers: O(V * E / wordsize) time, O(V^2 / 8) bytes. Every graph of the project has
`preds`/`succs` lists (`graph/core.py`), so these work on all of them. For graphs too large
for V^2 bits (bucket planning on 100k-op blocks) `graph/buckets.py` searches backwards
within a window instead.

`Reachability` answers every question the optimizers ask from the descendant sets alone:
membership both ways, a few whole ancestor sets by a backward search, and ancestor or
descendant sets restricted to a list of nodes (bit k = its k-th node), one OR per edge on
len(list)-bit integers. It keeps no per-node ancestor sets: those take as much again as
the descendant sets (29 MB next to 27 MB for the 20,702-op block of a 48-layer model's
token-8 candidate, the peak of `lancet-schedule`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import overload


def ancestor_bits(preds: Sequence[Sequence[int]], order: Sequence[int]) -> list[int]:
    """Bit j of result[i] is set iff j reaches i (`order`: a topological order)."""
    anc = [0] * len(preds)
    for v in order:
        bits = 0
        for p in preds[v]:
            bits |= anc[p] | (1 << p)
        anc[v] = bits
    return anc


class Bitsets(Sequence[int]):
    """One Python-int bitset per node, each stored without its zero low bits: `self[i]` is
    the full int again (bit j = node j). Descendant sets start above their node when nodes
    are numbered in a topological order (block order is one), and a plain int spends a word
    per 30 zero bits below its lowest set one: this halves what descendant sets take (56 of
    85 MB for the 20,702-op block of a 48-layer model's token-8 candidate, without it)."""

    __slots__ = ("_high", "_low")

    def __init__(self, masks: Sequence[int]) -> None:
        low = [(m & -m).bit_length() - 1 if m else 0 for m in masks]
        self._low = low
        self._high = [m >> k for m, k in zip(masks, low, strict=True)]

    def __len__(self) -> int:
        return len(self._high)

    @overload
    def __getitem__(self, i: int) -> int: ...
    @overload
    def __getitem__(self, i: slice) -> list[int]: ...
    def __getitem__(self, i: int | slice) -> int | list[int]:
        if isinstance(i, slice):
            return [self[k] for k in range(*i.indices(len(self)))]
        return self._high[i] << self._low[i]

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Bitsets):
            return self._high == other._high and self._low == other._low
        if isinstance(other, Sequence):
            return len(other) == len(self) and all(a == b for a, b in zip(self, other, strict=True))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # mutable-looking, like a list

    def __repr__(self) -> str:
        return f"Bitsets({list(self)!r})"


def descendant_bits(succs: Sequence[Sequence[int]], order: Sequence[int]) -> Bitsets:
    """Bit j of result[i] is set iff i reaches j (`order`: a topological order); stored as
    `Bitsets` (each set without its zero low bits)."""
    high = [0] * len(succs)
    low = [0] * len(succs)
    for v in reversed(order):
        bits = 0
        for s in succs[v]:
            bits |= high[s] << low[s] | (1 << s)
        k = (bits & -bits).bit_length() - 1 if bits else 0
        high[v], low[v] = bits >> k, k
    out = Bitsets.__new__(Bitsets)
    out._high, out._low = high, low
    return out


def ancestor_bits_among(
    preds: Sequence[Sequence[int]], order: Sequence[int], members: Sequence[int]
) -> list[int]:
    """Bit k of result[i] is set iff members[k] reaches i (`order`: a topological order;
    `members`: distinct nodes). Each set has len(members) bits, not one per node."""
    return _bits_among(preds, order, members)


def descendant_bits_among(
    succs: Sequence[Sequence[int]], order: Sequence[int], members: Sequence[int]
) -> list[int]:
    """Bit k of result[i] is set iff i reaches members[k] (`order`: a topological order;
    `members`: distinct nodes). Each set has len(members) bits, not one per node."""
    return _bits_among(succs, order[::-1], members)


def _bits_among(
    edges: Sequence[Sequence[int]], order: Sequence[int], members: Sequence[int]
) -> list[int]:
    """Bit k of result[i] is set iff a path of `edges` leads from i to members[k] (v's
    edges lead to `edges[v]`; `order` visits those before v): with `preds`, members[k]
    reaches i; with `succs` (reversed order), i reaches members[k]."""
    own = [0] * len(edges)
    for k, m in enumerate(members):
        own[m] = 1 << k
    out = [0] * len(edges)
    for v in order:
        bits = 0
        for u in edges[v]:
            bits |= out[u] | own[u]
        out[v] = bits
    return out


_FLAG_DIGITS = bytes.maketrans(b"\x00\x01", b"01")
"""0/1 flags to the digits '0'/'1': a flag array becomes an int in one linear `int(s, 2)`."""


class Reachability:
    """Reachability of a DAG kept as its descendant sets alone (module docstring).

    `descendants[i]`: bit j set iff i reaches j (`Bitsets`). An ancestor question is the
    transposed descendant one: j reaches i iff bit i of `descendants[j]` is set.
    """

    __slots__ = ("descendants", "order", "preds", "succs")

    def __init__(
        self,
        preds: Sequence[Sequence[int]],
        succs: Sequence[Sequence[int]],
        order: Sequence[int],
    ) -> None:
        """`order`: a topological order of the graph of `preds`/`succs` (kept, not copied,
        like the edge lists: the sets below are computed from them)."""
        self.preds = preds
        self.succs = succs
        self.order = order
        self.descendants = descendant_bits(succs, order)

    def __len__(self) -> int:
        return len(self.preds)

    def reaches(self, u: int, v: int) -> bool:
        """Whether there is a path u -> v of at least one edge (never u -> u in a DAG)."""
        desc = self.descendants
        k = v - desc._low[u]
        return k >= 0 and bool(desc._high[u] >> k & 1)

    def ancestors(self, v: int) -> int:
        """The nodes that reach `v`, as one bitset (bit j = node j): a backward search,
        O(ancestors + their edges), for the few callers that want a whole set."""
        preds = self.preds
        seen = bytearray(len(preds))
        stack = list(preds[v])
        while stack:
            p = stack.pop()
            if not seen[p]:
                seen[p] = 1
                stack.extend(preds[p])
        if not seen:
            return 0
        return int(seen[::-1].translate(_FLAG_DIGITS), 2)

    def ancestors_among(self, members: Sequence[int]) -> list[int]:
        """`ancestor_bits_among`: bit k of result[i] is set iff members[k] reaches i."""
        return ancestor_bits_among(self.preds, self.order, members)

    def descendants_among(self, members: Sequence[int]) -> list[int]:
        """`descendant_bits_among`: bit k of result[i] is set iff i reaches members[k]."""
        return descendant_bits_among(self.succs, self.order, members)


def bits_of(mask: int) -> list[int]:
    """The set bits of `mask` in ascending order."""
    out: list[int] = []
    while mask:
        low = mask & -mask
        out.append(low.bit_length() - 1)
        mask ^= low
    return out
