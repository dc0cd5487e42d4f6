"""Declarative sweeps: TOML files that name the golden cases to generate (docs/sweeps.md).

A sweep is data. Each ``[[block]]`` of a sweep file names one operator, the values of its
axes and named constraints (``refspec.goldens.constraints``); the block's cases are the product
of its axis values that satisfy every constraint. Tiers select a seeded, capped subsample of each
block (``cap`` cases at most, ``cover`` guaranteeing that every value of the listed axes
appears). Every case has a stable, readable id such as
``rope_grad/soc=A2/mode=half/layout=BNSD/cos=11SD/dtype=bfloat16/x=1/dist=random/B2N8S128D64``
and a seed derived from that id and the sweep seed (SHA-256), so a single case regenerates
alone with identical bits.

Nothing here knows an operator: its axes (names, how their values are read, their defaults),
its shape sizes and the rules between them come from its record (``refspec.ops``, the
record's ``sweep``). A case's parameters are its axis values and sizes under the axes' names.
Built-in sweeps live in ``refspec/goldens/sweeps/*.toml``; ``load_sweep`` takes a built-in
name or a path.
"""

from __future__ import annotations

import hashlib
import itertools
import os
import re
import sys
from dataclasses import dataclass, field
from importlib import resources
from typing import NamedTuple

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

from .. import ops
from ..ops.axes import env_value
from .constraints import Constraint, ExprError, SweepError
from .tiers import Tier, parse_tier, subsample

__all__ = [
    "SweepError", "ExprError", "Constraint", "Case", "Tier", "Block", "Sweep", "BUILTIN_SWEEPS",
    "builtin_sweeps", "load_sweep", "parse_sweep", "case_seed", "case_params", "parse_value",
]

BUILTIN_SWEEPS = ("smoke", "standard", "full")


def parse_value(axis, value):
    """One value of an axis as the record reads it (SweepError naming the axis otherwise)."""
    try:
        return axis.parse(value)
    except ValueError as exc:
        raise SweepError(f"axis {axis.name!r}: {exc}") from None


def _operator(name) -> ops.Operator:
    """The record of an operator named by id or spec function name (SweepError if none)."""
    op = ops.find(name)
    if op is None or name not in (op.id, op.function):
        raise SweepError(f"op {name!r} unknown; allowed: {', '.join(ops.ids())}")
    return op


def _norm_shape(op: ops.Operator, v) -> dict:
    """A shape value: an inline table ``{B=2, N=8, S=128, D=64}`` or the compact string of the
    record's example (``"B2N8S128D64"``); sizes the record gives a default may be left out, and
    a default that is a symbol (``Sr = "min"``) may be given as that symbol."""
    shape = op.sweep.shape
    keys, defaults = shape.keys, shape.defaults
    if isinstance(v, str):
        names = "|".join(sorted(keys, key=len, reverse=True))
        tokens = re.findall(rf"({names})(\d+|[a-z]+)", v.strip())
        if "".join(k + n for k, n in tokens) != v.strip():
            raise SweepError(f"axis 'shape': cannot read {v!r}; write it like "
                             f"'{shape.example}' or as a table {{{keys[0]}=2, ...}}")
        v = {k: (int(n) if n.isdigit() else n) for k, n in tokens}
    if not isinstance(v, dict):
        raise SweepError(f"axis 'shape': {v!r} must be a table such as {{{keys[0]}=2, ...}} "
                         f"or a string such as '{shape.example}'")
    unknown = sorted(set(v) - set(keys))
    if unknown:
        raise SweepError(f"axis 'shape': unknown size {unknown[0]!r} in {v!r} for op {op.id!r}; "
                         f"allowed: {', '.join(keys)}")
    out = {}
    for k in keys:
        if k not in v and k not in defaults:
            raise SweepError(f"axis 'shape': {v!r} lacks {k!r}; needed: {', '.join(keys)}")
        val = v.get(k, defaults.get(k))
        symbol = defaults.get(k) if isinstance(defaults.get(k), str) else None
        if symbol is not None and val == symbol:
            out[k] = val
            continue
        if isinstance(val, bool) or not isinstance(val, int) or val < 0:
            raise SweepError(f"axis 'shape': {k}={val!r} in {v!r} must be an integer >= 0"
                             + (f" or {symbol!r}" if symbol else ""))
        out[k] = val
    return out


# --- cases, tiers, blocks -------------------------------------------------------------------

def case_seed(sweep_seed: int, case_id: str) -> int:
    """The case's seed: the first 8 bytes (little-endian) of SHA-256("<sweep seed>:<case id>")."""
    digest = hashlib.sha256(f"{int(sweep_seed)}:{case_id}".encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "little")


@dataclass(frozen=True)
class Case:
    """One golden case: its id, operator (record id), parameters and seed."""

    id: str
    op: str
    params: dict = field(compare=False, hash=False)
    seed: int = 0
    block: str = ""


@dataclass
class Block:
    name: str
    op: str
    expect: str
    axes: dict
    constraints: list
    tier_overrides: dict
    source: str
    cases: list = field(default_factory=list)   # [(case_id, params)] in product order


_EXPECT = ("any", "accept", "reject")
_TOP_KEYS = ("name", "description", "seed", "default_tier", "include", "tiers", "block")
_BLOCK_KEYS = ("name", "op", "expect", "axes", "constraints", "tiers", "description")


def case_params(op: ops.Operator, values: dict) -> dict:
    """Canonical parameters of one case: the operator's id, its axis values and its sizes, by
    the axes' names (JSON-able)."""
    return {"op": op.id, **values}


def _known_names(op: ops.Operator) -> set:
    sw = op.sweep
    return set(sw.names) | set(sw.shape.keys) | set(sw.derived_names) | {"op"}


def _block_axes(op: ops.Operator, axes_raw) -> dict:
    """Every axis of the operator with its values (canonical, in the block's order; the
    record's defaults for the axes the block leaves out), and ``shape``."""
    if not isinstance(axes_raw, dict):
        raise SweepError("'axes' must be a table")
    by_name = {a.name: a for a in op.sweep.axes}
    allowed = op.sweep.names + ("shape",)
    axes = {}
    for name, values in axes_raw.items():
        if name not in allowed:
            raise SweepError(f"unknown axis {name!r} for op {op.id!r}; allowed: "
                             f"{', '.join(allowed)}")
        values = values if isinstance(values, list) else [values]
        if not values:
            raise SweepError(f"axis {name!r} has no values")
        if name == "shape":
            axes[name] = [_norm_shape(op, v) for v in values]
            continue
        axes[name] = [parse_value(by_name[name], v) for v in values]
        if len(set(axes[name])) != len(axes[name]):
            raise SweepError(f"axis {name!r} lists a value twice: {values!r}")
    required = [a.name for a in op.sweep.axes if not a.default] + ["shape"]
    for name in required:
        if name not in axes:
            raise SweepError(f"axis {name!r} is required")
    for axis in op.sweep.axes:
        axes.setdefault(axis.name, list(axis.default))
    try:
        op.sweep.check(axes, set(axes_raw))
    except ValueError as exc:
        raise SweepError(str(exc)) from None
    return axes


def _block_constraints(op: ops.Operator, raw) -> list:
    if not isinstance(raw, dict):
        raise SweepError("'constraints' must be a table of name = \"expression\"")
    constraints = []
    for name, text in raw.items():
        c = Constraint(name, text)
        unknown = sorted(c.names - _known_names(op))
        if unknown:
            raise SweepError(f"constraint {name!r} uses unknown name {unknown[0]!r}; "
                             f"known: {', '.join(sorted(_known_names(op)))}")
        constraints.append(c)
    return constraints


def _block_tiers(raw, tiers: dict) -> dict:
    if not isinstance(raw, dict):
        raise SweepError("'tiers' must be a table of tier name = {cap = N, cover = [...]}")
    out = {}
    for tname, spec in raw.items():
        if tname not in tiers:
            raise SweepError(f"tiers.{tname}: no such tier; defined: "
                             f"{', '.join(tiers) or '(none)'}")
        out[tname] = parse_tier(tname, spec, f"tiers.{tname}", block=True)
    return out


def _parse_block(raw, index: int, source: str, tiers: dict) -> Block:
    where = f"{source}: block {index + 1}"
    if not isinstance(raw, dict):
        raise SweepError(f"{where}: must be a table ([[block]])")
    if raw.get("name"):
        where += f" ({raw['name']!r})"
    try:
        unknown = sorted(set(raw) - set(_BLOCK_KEYS))
        if unknown:
            raise SweepError(f"unknown key {unknown[0]!r}; allowed: {', '.join(_BLOCK_KEYS)}")
        op = _operator(raw.get("op"))
        expect = raw.get("expect", "any")
        if expect not in _EXPECT:
            raise SweepError(f"expect {expect!r} unknown; allowed: {', '.join(_EXPECT)}")
        block = Block(name=str(raw.get("name") or f"block{index + 1}"), op=op.id, expect=expect,
                      axes=_block_axes(op, raw.get("axes", {})),
                      constraints=_block_constraints(op, raw.get("constraints", {})),
                      tier_overrides=_block_tiers(raw.get("tiers", {}), tiers), source=source)
        _expand_block(block)
    except SweepError as exc:
        raise SweepError(f"{where}: {exc}") from None
    return block


def _expand_block(block: Block) -> None:
    """The block's cases: the product of its axis values (in the record's order) that the
    record admits, each with every shape, completed, that satisfies every constraint."""
    op = ops.get(block.op)
    sw = op.sweep
    seen = set()
    for combo in itertools.product(*(block.axes[n] for n in sw.names)):
        values = dict(zip(sw.names, combo))
        if not sw.admits(values):
            continue
        for shape in block.axes["shape"]:
            v = sw.complete({**values, **shape})
            env = {**{k: env_value(x) for k, x in v.items()}, **sw.derived(v), "op": op.id}
            if not all(c(env) for c in block.constraints):
                continue
            parts = [op.id] + [f"{a.name}={a.id_text(v[a.name])}" for a in sw.axes
                               if a.in_id(v[a.name])]
            case_id = "/".join(parts + [sw.shape.label(v)])
            if case_id not in seen:
                seen.add(case_id)
                block.cases.append((case_id, case_params(op, v)))


class Source(NamedTuple):
    """Where a sweep comes from: its TOML text (included files appended), what ``--sweep`` takes
    to load it again, and its file (None for a built-in one)."""

    definition: str
    ref: str
    path: str | None


class Sweep:
    """A loaded, validated sweep (see the module docstring and docs/sweeps.md)."""

    def __init__(self, *, name, description, seed, default_tier, tiers, blocks, source: Source):
        self.name = name
        self.description = description
        self.seed = seed
        self.default_tier = default_tier
        self.tiers = tiers                  # name -> Tier (without the implicit "all")
        self.blocks = blocks
        self.definition = source.definition  # TOML text (with included files appended)
        self.ref = source.ref               # what to pass to --sweep to load it again
        self.path = source.path
        self._params = {}
        self._order = []
        for b in blocks:
            for cid, p in b.cases:
                if cid not in self._params:
                    self._params[cid] = (b, p)
                    self._order.append(cid)
        self._tier_ids = {}
        for t in self.tier_names():
            self._tier_ids[t] = self._select_tier(t)
        membership = {cid: [t for t in self.tier_names() if cid in self._tier_ids[t]]
                      for cid in self._order}
        self._membership = membership

    def tier_names(self) -> list[str]:
        return ["all"] + [t for t in self.tiers]

    def _select_tier(self, tier: str) -> set:
        if tier == "all":
            return set(self._order)
        chosen = set()
        for b in self.blocks:
            chosen.update(subsample(b, self.tiers[tier], self.seed))
        return chosen

    def check_tier(self, tier: str | None) -> str:
        tier = self.default_tier if tier is None else tier
        if tier not in self._tier_ids:
            raise SweepError(f"sweep {self.name!r} has no tier {tier!r}; tiers: "
                             f"{', '.join(self.tier_names())}")
        return tier

    def cases(self, tier: str | None = None, seed: int | None = None) -> list[Case]:
        """The cases of a tier (default: the sweep's default tier) in sweep order; ``seed``
        overrides the sweep seed for the data (not for the tier subsample)."""
        tier = self.check_tier(tier)
        chosen = self._tier_ids[tier]
        return [self._case(cid, seed) for cid in self._order if cid in chosen]

    def all_cases(self, seed: int | None = None) -> list[Case]:
        return [self._case(cid, seed) for cid in self._order]

    def __contains__(self, case_id) -> bool:
        return case_id in self._params

    def case(self, case_id: str, seed: int | None = None) -> Case:
        if case_id not in self._params:
            raise SweepError(f"case {case_id!r} is not in sweep {self.name!r} "
                             f"(`refspec list --sweep {self.ref} --tier all` lists its cases)")
        return self._case(case_id, seed)

    def _case(self, case_id: str, seed: int | None) -> Case:
        block, params = self._params[case_id]
        p = dict(params)
        p["tiers"] = list(self._membership[case_id])
        data_seed = self.seed if seed is None else int(seed)
        return Case(case_id, block.op, p, case_seed(data_seed, case_id), block.name)

    def block_of(self, case_id: str) -> Block:
        return self._params[case_id][0]

    def __repr__(self):
        return f"<Sweep {self.name} ({len(self._order)} cases, tiers {self.tier_names()})>"


# --- loading --------------------------------------------------------------------------------

def builtin_sweeps() -> tuple[str, ...]:
    """Names of the sweeps shipped in refspec/sweeps/."""
    folder = resources.files("refspec.goldens") / "sweeps"
    return tuple(sorted(p.name[:-5] for p in folder.iterdir() if p.name.endswith(".toml")))


def _read_source(ref: str, base_dir: str | None):
    """(text, display name, path) of a built-in name or a TOML path."""
    ref = str(ref)
    candidates = [ref] if os.path.isabs(ref) or base_dir is None else [os.path.join(base_dir, ref), ref]
    for cand in candidates:
        if os.path.isfile(cand):
            try:
                with open(cand, "rb") as fh:
                    return fh.read().decode("utf-8"), cand, os.path.abspath(cand)
            except (OSError, UnicodeDecodeError) as exc:
                raise SweepError(f"{cand}: cannot read sweep file ({exc})") from None
    if os.sep not in ref and "/" not in ref and not ref.endswith(".toml"):
        res = resources.files("refspec.goldens") / "sweeps" / f"{ref}.toml"
        if res.is_file():
            return res.read_text(encoding="utf-8"), f"{ref}.toml (built-in)", None
    if ref.endswith(".toml") or os.sep in ref or "/" in ref:
        raise SweepError(f"sweep file {ref!r} does not exist")
    raise SweepError(f"unknown sweep {ref!r}; built-in: {', '.join(builtin_sweeps())}; "
                     "or give the path of a .toml file")


def parse_sweep(text: str, source: str = "<sweep>", ref: str | None = None, path=None,
                _stack=()) -> Sweep:
    """Parse and validate the TOML text of a sweep (see docs/sweeps.md for the format)."""
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise SweepError(f"{source}: malformed TOML: {exc}") from None
    unknown = sorted(set(raw) - set(_TOP_KEYS))
    if unknown:
        raise SweepError(f"{source}: unknown top-level key {unknown[0]!r}; allowed: "
                         f"{', '.join(_TOP_KEYS)}")
    name = raw.get("name")
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9_.-]+", name or ""):
        raise SweepError(f"{source}: 'name' must be a string of letters, digits, _ . - "
                         f"(got {name!r})")
    seed = raw.get("seed", 0)
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise SweepError(f"{source}: 'seed' must be an integer >= 0 (got {seed!r})")
    tiers_raw = raw.get("tiers", {})
    if not isinstance(tiers_raw, dict):
        raise SweepError(f"{source}: 'tiers' must be a table of [tiers.NAME] tables")
    if "all" in tiers_raw:
        raise SweepError(f"{source}: tier 'all' is implicit (every case) and cannot be redefined")
    tiers = {t: parse_tier(t, spec, f"{source}: tiers.{t}") for t, spec in tiers_raw.items()}
    default_tier = raw.get("default_tier", "all")
    if default_tier != "all" and default_tier not in tiers:
        raise SweepError(f"{source}: default_tier {default_tier!r} is not a tier; tiers: all"
                         + "".join(f", {t}" for t in tiers))

    blocks, definition = [], text
    includes = raw.get("include", [])
    if isinstance(includes, str):
        includes = [includes]
    base_dir = os.path.dirname(path) if path else None
    for inc in includes:
        inc_text, inc_source, inc_path = _read_source(inc, base_dir)
        key = inc_path or inc_source
        if key in _stack:
            raise SweepError(f"{source}: include {inc!r} is circular")
        inc_sweep = parse_sweep(inc_text, inc_source, inc, inc_path, _stack + (key,))
        for b in inc_sweep.blocks:
            b.tier_overrides = {t: o for t, o in b.tier_overrides.items() if t in tiers}
            blocks.append(b)
        definition += f"\n# ---- included: {inc} ----\n" + inc_sweep.definition
    raw_blocks = raw.get("block", [])
    if not isinstance(raw_blocks, list):
        raise SweepError(f"{source}: 'block' must be an array of tables ([[block]])")
    blocks += [_parse_block(b, i, source, tiers) for i, b in enumerate(raw_blocks)]
    if not blocks:
        raise SweepError(f"{source}: the sweep has no [[block]]")
    return Sweep(name=name, description=str(raw.get("description", "")), seed=seed,
                 default_tier=default_tier, tiers=tiers, blocks=blocks,
                 source=Source(definition, ref or name, path))


_LOADED: dict = {}


def load_sweep(ref) -> Sweep:
    """A built-in sweep by name (``smoke``, ``standard``, ``full``) or a sweep file by path.
    Parsed sweeps are cached by their text (a Sweep is never modified after loading)."""
    text, source, path = _read_source(os.fspath(ref), None)
    key = (os.fspath(ref), source, text)
    if key not in _LOADED:
        _LOADED[key] = parse_sweep(text, source, ref=os.fspath(ref), path=path,
                                   _stack=(path or source,))
    return _LOADED[key]
