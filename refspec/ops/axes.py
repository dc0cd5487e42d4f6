"""Sweep axes as data: each axis of an operator's cases says how a sweep file spells its values,
what they become, and which spec attribute they set (docs/sweeps.md, "Axes").

An axis's name is the one name of the concept everywhere: in case ids (``mode=half``), in the
case parameters, in the golden file, in ``--mode`` filters. Its values are stored as the case id
shows them (RoPE's mode as its documented label, ``half``); ``to_spec`` converts them only where
the spec function is called (``half`` -> ``RopeMode.HALF``). ``parse`` turns what a sweep file,
a dump or a case folder gives into that value, raising ``ValueError`` with the allowed values.

The axes every operator shares are made by ``soc_axis``, ``dtype_axis``, ``dist_axis`` and
``fault_axis``; the others by ``choice``, ``flag``, ``numbered`` and ``enum_labels``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any, Callable, Mapping

from ..spec.dtypes import dtype_name, resolve_dtype
from ..spec.errors import AclnnError
from .sampling import DISTRIBUTIONS

__all__ = ["Axis", "Shape", "bad_value", "choice", "flag", "numbered", "enum_labels",
           "number", "integers", "env_value", "PROFILES", "soc_axis", "dtype_axis", "dist_axis", "fault_axis", "DTYPES"]

#: the dtypes a sweep may name
DTYPES = ("float16", "bfloat16", "float32", "float64")


def bad_value(value, allowed) -> ValueError:
    """``unknown value 'x'; allowed: a, b`` (a sweep prefixes the axis's name)."""
    return ValueError(f"unknown value {value!r}; allowed: {', '.join(str(a) for a in allowed)}")


#: ``Axis.omit`` of an axis whose every value is in the case id
NOTHING = object()


def _identity(value):
    return value


def env_value(value):
    """A value as constraints and case ids see it: None (the math-only profile) as ``none``."""
    return "none" if value is None else value


@dataclass(frozen=True)
class Axis:
    """One axis of an operator's cases.

    ``name``: its one name (case ids, parameters, filters); ``parse``: a given value -> the
    canonical one (ValueError naming what is allowed); ``default``: the values of a block that
    names none (empty: the axis is required); ``attr``/``to_spec``: the spec attribute it sets
    and the conversion of its value; ``omit``: a value left out of the case id (``fault=none``);
    ``legacy``: the parameter that held the value in golden files of schema 1; ``filters``: the
    command-line filters (``--mode``) that match this axis besides its own name; ``values``: the
    canonical values, where there is a fixed list of them."""

    name: str
    parse: Callable[[Any], Any]
    default: tuple = ()
    values: tuple = ()
    attr: str | None = None
    to_spec: Callable[[Any], Any] = _identity
    omit: Any = NOTHING
    legacy: str | None = None
    filters: tuple[str, ...] = ()

    def in_id(self, value) -> bool:
        """Whether the case id shows this value (``omit`` is left out)."""
        return self.omit is NOTHING or value != self.omit

    def id_text(self, value) -> str:
        """The value as the case id spells it (booleans as 0/1, None as ``none``)."""
        return str(int(value)) if isinstance(value, bool) else str(env_value(value))

    def answers(self, kind: str) -> bool:
        """Whether the ``--<kind>`` filter matches this axis."""
        return kind == self.name or kind in self.filters


@dataclass(frozen=True)
class Shape:
    """The shape part of an operator's cases: the ``keys`` of its sizes (``B N S D``), an
    ``example`` of the compact spelling, ``defaults`` for sizes a block may leave out (a string
    default is a symbol such as ``"min"`` that ``complete`` resolves), and ``label(sizes)``, the
    shape part of a case id."""

    keys: tuple[str, ...]
    example: str
    label: Callable[[dict], str]
    defaults: Mapping[str, Any] = field(default_factory=dict)


# --- value parsers ------------------------------------------------------------------------------

def choice(values, aliases: Mapping[str, str] | None = None, upper: bool = False) -> Callable:
    """A parser for one of ``values`` (strings, compared without case; ``_`` and ``-`` alike
    unless ``upper``), with other spellings in ``aliases``."""
    aliases = dict(aliases or {})

    def parse(v):
        s = str(v).strip()
        s = s.upper() if upper else s.lower().replace("_", "-")
        s = aliases.get(s, s)
        if s not in values or isinstance(v, bool):
            raise bad_value(v, tuple(values))
        return s
    return parse


def flag(v) -> bool:
    """true/false, 1/0 (as a number or a string)."""
    if isinstance(v, bool):
        return v
    if isinstance(v, int) and v in (0, 1):
        return bool(v)
    if isinstance(v, str) and v.strip().lower() in ("0", "1", "true", "false"):
        return v.strip().lower() in ("1", "true")
    raise bad_value(v, ("true", "false", 0, 1))


def numbered(numbers: tuple, names: Mapping[str, int] | None = None, shown=None) -> Callable:
    """A parser for an integer attribute given as one of its ``numbers`` or of its ``names``;
    ``shown`` is what a message lists as allowed (default: the numbers)."""
    names = dict(names or {})

    def parse(v):
        if isinstance(v, int) and not isinstance(v, bool) and v in numbers:
            return int(v)
        if isinstance(v, str) and v.strip().lower() in names:
            return names[v.strip().lower()]
        raise bad_value(v, shown or numbers)
    return parse


def enum_labels(enum: type[IntEnum], label: Callable[[IntEnum], str]) -> tuple[Callable, Callable]:
    """(parse, to_spec) of an enum stored as its documented labels: parse takes a label or the
    number, to_spec gives the number back as the enum member."""
    by_label = {label(m): m for m in enum}

    def parse(v):
        if isinstance(v, int) and not isinstance(v, bool) and v in tuple(enum):
            return label(enum(v))
        if isinstance(v, enum):
            return label(v)
        s = str(v).strip().lower().replace("_", "-")
        if s.isdigit() and int(s) in tuple(enum):
            return label(enum(int(s)))
        if s not in by_label or isinstance(v, bool):
            raise bad_value(v, tuple(by_label) + (f"or {min(enum)}..{max(enum)}",))
        return s

    return parse, lambda value: int(by_label[value]) if value in by_label else value


def number(low: float = 0.0) -> Callable:
    """A parser for a finite number >= ``low`` (given as a number or a string)."""
    def parse(v):
        try:
            x = float(v) if not isinstance(v, bool) else math.nan
        except (TypeError, ValueError):
            x = math.nan
        if not (math.isfinite(x) and x >= low):
            raise ValueError(f"{v!r} is not a finite number >= {low:g}")
        return x
    return parse


def integers(n: int, example: str) -> Callable:
    """A parser for ``n`` integers >= 0, given as ``example`` (``512,128,128``) or a list;
    the value is that string with no spaces."""
    def parse(v) -> str:
        parts = list(v) if isinstance(v, (list, tuple)) else str(v).replace(" ", "").split(",")
        try:
            vals = [int(x) for x in parts if not isinstance(x, bool)]
        except (TypeError, ValueError):
            vals = []
        if len(vals) != n or len(parts) != n or min(vals) < 0:
            raise ValueError(f"{v!r} is not {n} integers >= 0 such as {example}")
        return ",".join(map(str, vals))
    return parse


# --- the axes every operator has ----------------------------------------------------------------

#: every chip profile a case may name (None: the math-only one); an operator's record says
#: which of them it has (``Generation.socs``): the others reject it
PROFILES = ("A2", "A3", "950", None)


def soc_axis() -> Axis:
    """The chip profile: its name, ``none`` for the math-only one (stored as None)."""
    socs = PROFILES
    names = tuple("none" if s is None else s for s in socs)

    def parse(v):
        if v is None:
            if None in socs:
                return None
            raise bad_value(v, names)
        s = str(v).strip()
        s = "none" if s.lower() == "none" else s.upper()
        if s.startswith("ASCEND"):
            s = s[len("ASCEND"):]
        if s not in names or isinstance(v, bool):
            raise bad_value(v, names)
        return None if s == "none" else s
    return Axis("soc", parse, values=tuple(socs))


def _dtype(v) -> str:
    try:
        return dtype_name(resolve_dtype(str(v)))
    except AclnnError:
        raise bad_value(v, DTYPES) from None


def dtype_axis() -> Axis:
    return Axis("dtype", _dtype, values=DTYPES)


def dist_axis() -> Axis:
    return Axis("dist", choice(DISTRIBUTIONS), default=("random",), values=DISTRIBUTIONS,
                legacy="distribution")


def fault_axis(faults) -> Axis:
    """The deliberate argument defect of a negative case (``none``: left out of the id)."""
    def parse(v):
        if v not in faults:
            raise bad_value(v, faults)
        return v
    return Axis("fault", parse, default=("none",), values=tuple(faults), omit="none")
