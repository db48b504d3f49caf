"""Attributes numbered by value, found again by identity: cheap memo keys.

xDSL attributes are frozen dataclasses whose hash and equality recurse through their
parameters on every call (a tensor type: its shape's integers, its element type), so a memo
keyed by the types of an op spends most of its time hashing them. `AttrNumbers` gives each
distinct attribute value a small integer, once, and finds the number of an object it has
seen by its identity; a key of such numbers is equal to another exactly when the attributes
are equal, and hashes fast.
"""

from __future__ import annotations

from xdsl.ir import Attribute

IDENTITY_LIMIT = 1 << 12
"""Objects an identity map holds at most: each keeps an attribute alive (the types of the
partitioners' discarded copies too), so a larger map costs peak memory (1 << 16 added
about 6 MB at 24 layers) for few more identity hits."""


class AttrNumbers:
    """Attribute values numbered in first-seen order (module doc).

    The identity map holds the objects it saw, so no id is reused while mapped; it is emptied
    when it reaches `identity_limit` entries (memory stays bounded; the numbers by value are
    kept, so a number never changes). `len()` is the count of distinct values numbered: a
    long-lived owner bounds its memory by replacing the whole object together with every
    key made from it."""

    def __init__(self, identity_limit: int = IDENTITY_LIMIT) -> None:
        self.identity_limit = identity_limit
        self._by_id: dict[int, tuple[Attribute, int]] = {}
        self._by_value: dict[Attribute, int] = {}

    def __len__(self) -> int:
        return len(self._by_value)

    def number(self, attr: Attribute) -> int:
        """The number of `attr`'s value."""
        seen = self._by_id.get(id(attr))
        if seen is not None and seen[0] is attr:
            return seen[1]
        n = self._by_value.setdefault(attr, len(self._by_value))
        if len(self._by_id) >= self.identity_limit:
            self._by_id.clear()
        self._by_id[id(attr)] = (attr, n)
        return n
