"""Checked pass options: one clear line naming the pass and the option for every bad value.

xDSL converts `name{opt=value}` with `isinstance` checks only, so `true` passes as the
integer 1 (bool is an int subclass) and a wrong type reads "Incompatible types: given
('abc',), expected <class 'int'>" without naming the pass or the option. Passes mix in
`CheckedOptions` to get `"<pass>: option <opt> expects an integer, got 'abc'"` instead, and
call `check_int` / `check_number` in `apply` for the ranges (which also reject booleans
given from Python).
"""

from __future__ import annotations

import dataclasses
import math
import re
from types import NoneType, UnionType
from typing import Any, Union, get_args, get_origin, get_type_hints

from xdsl.utils.arg_spec import ArgSpec
from xdsl.utils.exceptions import PassFailedException

_KIND_NAMES = {
    int: ("an integer", "integers"),
    float: ("a number", "numbers"),
    str: ("a string", "strings"),
}


def _scalar_types(hint: Any) -> tuple[tuple[type, ...], bool]:
    """(allowed scalar types, whether a list is allowed) of an option's type hint."""
    origin = get_origin(hint)
    if origin in (Union, UnionType):
        kinds = tuple(a for a in get_args(hint) if a is not NoneType)
        if len(kinds) == 1 and get_origin(kinds[0]) is tuple:  # `tuple[str, ...] | None`
            return _scalar_types(kinds[0])
        return kinds, False
    if origin is tuple:
        return tuple(a for a in get_args(hint) if a is not Ellipsis), True
    return (hint,), False


def _expected(kinds: tuple[type, ...], many: bool) -> str:
    """'an integer', 'a number' (int or float), 'a comma-separated list of strings', ..."""
    names = [
        _KIND_NAMES.get(k, (k.__name__, k.__name__))
        for k in kinds
        if k is not int or float not in kinds
    ]
    if many:
        return "a comma-separated list of " + " or ".join(n[1] for n in names)
    return " or ".join(n[0] for n in names)


def _show(values: Any) -> str:
    """A value as the user typed it in the pipeline."""

    def one(v: Any) -> str:
        if isinstance(v, bool):
            return "true" if v else "false"
        return repr(v) if isinstance(v, str) else str(v)

    if isinstance(values, list | tuple):
        return ",".join(one(v) for v in values) if values else "nothing"
    return one(values)


def _accepts(kinds: tuple[type, ...], value: Any) -> bool:
    if isinstance(value, bool):  # `true` is not an integer option value
        return bool in kinds
    if isinstance(value, int) and float in kinds:
        return True
    return isinstance(value, kinds)


def check_option_values(pass_name: str, option: str, values: list[Any], hint: Any) -> None:
    """Raise PassFailedException unless `values` (as parsed from the pipeline) fit `hint`."""
    kinds, many = _scalar_types(hint)
    if not kinds:
        return
    fits = all(_accepts(kinds, v) for v in values) and (many or len(values) == 1)
    if many and not values:
        fits = False
    if not fits:
        raise PassFailedException(
            f"{pass_name}: option {option.replace('_', '-')} expects {_expected(kinds, many)}, "
            f"got {_show(values)}"
        )


class CheckedOptions:
    """Mixin for ModulePass dataclasses: type-check pipeline options with clear messages.

    Put it before `ModulePass` in the bases: `class P(CheckedOptions, ModulePass)`.
    """

    name: str

    @classmethod
    def from_spec(cls, spec: ArgSpec) -> Any:
        """Check every given option's values, then build the pass as xDSL does."""
        hints = get_type_hints(cls)
        known = [f.name for f in dataclasses.fields(cls) if f.init and f.name != "name"]  # type: ignore[arg-type]
        given = spec.normalize_parameter_names().parameters
        for option, values in given.items():
            if option not in known:
                raise PassFailedException(f"{cls.name}: {_unknown(option, known)}")
            given[option] = values = _numbers_read(values, hints[option])
            check_option_values(cls.name, option, list(values), hints[option])
        try:
            return super().from_spec(ArgSpec(spec.name, given))  # type: ignore[misc]
        except ValueError as exc:
            raise PassFailedException(f"{cls.name}: {exc}") from None


_EXPONENT_LITERAL = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)[eE][+-]?\d+")
"""A number with an exponent and maybe no dot (`1e1`, `5e-3`), which xDSL's pipeline lexer
reads as a bare word (it reads `1.0e1` as a float)."""


def _numbers_read(values: Any, hint: Any) -> Any:
    """`values` with each exponent literal read as a float, for an option that takes
    numbers and no strings (for a string option it stays the word typed)."""
    kinds, _ = _scalar_types(hint)
    if float not in kinds or str in kinds:
        return values
    return type(values)(
        float(v) if isinstance(v, str) and _EXPONENT_LITERAL.fullmatch(v) else v for v in values
    )


def _unknown(option: str, known: list[str]) -> str:
    name = option.replace("_", "-")
    if not known:
        return f"unknown option {name} (the pass takes no options)"
    return f"unknown option {name}; options: " + ", ".join(k.replace("_", "-") for k in known)


def check_int(pass_name: str, option: str, value: object, minimum: int) -> int:
    """`value` as an int >= `minimum`, else PassFailedException naming pass and option."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise PassFailedException(f"{pass_name}: {option} must be an integer, got {_show(value)}")
    if value < minimum:
        raise PassFailedException(f"{pass_name}: {option} must be >= {minimum}, got {value}")
    return value


def check_number(pass_name: str, option: str, value: object, minimum: float) -> float:
    """`value` as a finite float >= `minimum`, else PassFailedException."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise PassFailedException(f"{pass_name}: {option} must be a number, got {_show(value)}")
    if not (math.isfinite(value) and value >= minimum):
        raise PassFailedException(
            f"{pass_name}: {option} must be finite and >= {minimum}, got {value}"
        )
    return float(value)
