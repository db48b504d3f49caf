"""Reachability on plain DAGs as Python-int bitsets (bit j set = node j), one OR per edge on
V-bit integers: O(V * E / wordsize) time, O(V^2 / 8) bytes. Every graph of the project has
`preds`/`succs` lists (`graph/core.py`), so these work on all of them. For graphs too large
for V^2 bits (bucket planning on 100k-op blocks) `graph/buckets.py` searches backwards
within a window instead.
"""

from __future__ import annotations

from collections.abc import Sequence


def ancestor_bits(preds: Sequence[Sequence[int]], order: Sequence[int]) -> list[int]:
    """Bit j of result[i] is set iff j reaches i (`order`: a topological order)."""
    anc = [0] * len(preds)
    for v in order:
        bits = 0
        for p in preds[v]:
            bits |= anc[p] | (1 << p)
        anc[v] = bits
    return anc


def descendant_bits(succs: Sequence[Sequence[int]], order: Sequence[int]) -> list[int]:
    """Bit j of result[i] is set iff i reaches j (`order`: a topological order)."""
    desc = [0] * len(succs)
    for v in reversed(order):
        bits = 0
        for s in succs[v]:
            bits |= desc[s] | (1 << s)
        desc[v] = bits
    return desc


def bits_of(mask: int) -> list[int]:
    """The set bits of `mask` in ascending order."""
    out: list[int] = []
    while mask:
        low = mask & -mask
        out.append(low.bit_length() - 1)
        mask ^= low
    return out
