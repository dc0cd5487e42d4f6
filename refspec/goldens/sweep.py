"""Declarative sweeps: TOML files that name the golden cases to generate (docs/sweeps.md).

A sweep is data. Each ``[[block]]`` of a sweep file names one operator, the values of its
axes (chip profile ``soc``, ``mode``, ``layout``, cos/sin pattern ``cos``, ``dtype``, ``x``,
input distribution ``dist``, ``shape``, ...), and named constraints; the block's cases are the
product of its axis values that satisfy every constraint. Tiers select a seeded, capped
subsample of each block (``cap`` cases at most, ``cover`` guaranteeing that every value of the
listed axes appears). Every case has a stable, readable id such as
``rope_grad/soc=A2/mode=half/layout=BNSD/cos=11SD/dtype=bfloat16/x=1/dist=random/B2N8S128D64``
and a seed derived from that id and the sweep seed (SHA-256), so a single case regenerates
alone with identical bits.

Built-in sweeps live in ``refspec/goldens/sweeps/*.toml``; ``load_sweep`` takes a built-in
name or a path. Constraints are evaluated by a whitelisting tree walker (``Constraint``),
never by ``eval``. What differs between operators (their axes, shape sizes, faults, case
parameters) comes from their records (``refspec.ops``).
"""

from __future__ import annotations

import ast
import hashlib
import itertools
import operator
import os
import re
import sys
from dataclasses import dataclass, field
from importlib import resources

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

from .. import ops
from ..ops.nrc import ROPE_TYPES
from ..ops.rope import MODES
from ..ops.sampling import DISTRIBUTIONS
from ..spec.dtypes import dtype_name, resolve_dtype
from ..spec.enums import RopeMode, RopeType
from ..spec.errors import AclnnError
from ..spec.layouts import LAYOUTS

__all__ = [
    "SweepError", "ExprError", "Constraint", "Case", "Tier", "Block", "Sweep", "BUILTIN_SWEEPS",
    "builtin_sweeps", "load_sweep", "parse_sweep", "case_seed", "parse_shard", "shard",
    "select_cases", "normalize_filter", "case_params",
]

BUILTIN_SWEEPS = ("smoke", "standard", "full")
SOC_VALUES = ("A2", "A3", "950", "none")
DTYPES = ("float16", "bfloat16", "float32", "float64")


class SweepError(ValueError):
    """A sweep that cannot be found, parsed or validated; the message names file and place."""


# --- constraints: a whitelisted expression language -----------------------------------------

class ExprError(SweepError):
    """A constraint outside the whitelist, or one that fails when evaluated."""


FUNCTIONS = {"min": min, "max": max, "abs": abs, "len": len}
_BINOPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
           ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod}
_CMPOPS = {ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le,
           ast.Gt: operator.gt, ast.GtE: operator.ge,
           ast.In: lambda a, b: a in b, ast.NotIn: lambda a, b: a not in b}
_UNARY = {ast.Not: operator.not_, ast.USub: operator.neg, ast.UAdd: operator.pos}


def _is_number(v) -> bool:
    """Arithmetic operands: int, float or bool (True = 1); never strings or tuples."""
    return isinstance(v, (int, float))


class Constraint:
    """A named constraint: an expression such as ``"mode == 'half' or cos == '11SD'"`` or
    ``"B * N <= 1024"`` over axis values and shape sizes.

    It is parsed with ``ast`` and checked against a whitelist when the sweep loads: names,
    literals (numbers, strings, booleans), ``and``/``or``/``not``, comparisons (``in`` too),
    ``+ - * // %`` on numbers, tuples/lists, and ``min``, ``max``, ``abs``, ``len``. Evaluation
    walks the checked tree; nothing reaches ``eval``.
    """

    def __init__(self, name: str, text):
        self.name = name
        self.text = text
        if not isinstance(text, str):
            raise ExprError(f"constraint {name!r} must be a string expression, got {text!r}")
        try:
            tree = ast.parse(text.strip(), mode="eval")
        except SyntaxError as exc:
            raise ExprError(f"constraint {name!r}: syntax error in {text!r} "
                            f"(column {exc.offset})") from None
        self._body = tree.body
        self.names: set[str] = set()
        self._check(self._body)

    def _reject(self, what: str):
        raise ExprError(f"constraint {self.name!r}: {what} is not allowed in {self.text!r}; "
                        "allowed: names, literals, and/or/not, comparisons, in, + - * // %, "
                        f"tuples, {', '.join(FUNCTIONS)}()")

    def _check(self, node) -> None:
        if isinstance(node, ast.Constant):
            if not isinstance(node.value, (int, float, str, bool)):
                self._reject(f"constant {node.value!r}")
        elif isinstance(node, ast.Name):
            if node.id not in FUNCTIONS:
                self.names.add(node.id)
        elif isinstance(node, ast.BoolOp):
            for v in node.values:
                self._check(v)
        elif isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
            self._check(node.operand)
        elif isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
            self._check(node.left)
            self._check(node.right)
        elif isinstance(node, ast.Compare) and all(type(o) in _CMPOPS for o in node.ops):
            self._check(node.left)
            for c in node.comparators:
                self._check(c)
        elif isinstance(node, (ast.Tuple, ast.List)):
            for e in node.elts:
                self._check(e)
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
              and node.func.id in FUNCTIONS and not node.keywords
              and not any(isinstance(a, ast.Starred) for a in node.args)):
            for a in node.args:
                self._check(a)
        elif isinstance(node, ast.Call):
            self._reject("call of " + (node.func.id if isinstance(node.func, ast.Name)
                                       else "an expression"))
        else:
            self._reject(type(node).__name__)

    def __call__(self, env: dict) -> bool:
        try:
            return bool(self._eval(self._body, env))
        except ExprError:
            raise
        except Exception as exc:  # ZeroDivisionError, comparisons of mixed types, ...
            raise ExprError(f"constraint {self.name!r} ({self.text!r}) failed: "
                            f"{type(exc).__name__}: {exc}") from None

    def _eval(self, node, env):
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Name):
            if node.id not in env:
                raise ExprError(f"constraint {self.name!r}: unknown name {node.id!r}")
            return env[node.id]
        if isinstance(node, ast.BoolOp):
            stop = (lambda v: not v) if isinstance(node.op, ast.And) else bool
            value = None
            for v in node.values:
                value = self._eval(v, env)
                if stop(value):
                    break
            return value
        if isinstance(node, ast.UnaryOp):
            value = self._eval(node.operand, env)
            if not isinstance(node.op, ast.Not) and not _is_number(value):
                raise ExprError(f"constraint {self.name!r}: unary minus/plus of {value!r}")
            return _UNARY[type(node.op)](value)
        if isinstance(node, ast.BinOp):
            left, right = self._eval(node.left, env), self._eval(node.right, env)
            if not (_is_number(left) and _is_number(right)):
                raise ExprError(f"constraint {self.name!r}: arithmetic needs numbers, got "
                                f"{left!r} and {right!r}")
            return _BINOPS[type(node.op)](left, right)
        if isinstance(node, ast.Compare):
            left = self._eval(node.left, env)
            for op, comp in zip(node.ops, node.comparators):
                right = self._eval(comp, env)
                if not _CMPOPS[type(op)](left, right):
                    return False
                left = right
            return True
        if isinstance(node, (ast.Tuple, ast.List)):
            return tuple(self._eval(e, env) for e in node.elts)
        return FUNCTIONS[node.func.id](*(self._eval(a, env) for a in node.args))


# --- axis values ----------------------------------------------------------------------------

def _bad(axis: str, value, allowed) -> SweepError:
    return SweepError(f"axis {axis!r}: unknown value {value!r}; allowed: "
                      f"{', '.join(str(a) for a in allowed)}")


def _norm_soc(v):
    s = str(v).strip()
    s = "none" if s.lower() == "none" else s.upper()
    if s.startswith("ASCEND"):
        s = s[len("ASCEND"):]
    if s not in SOC_VALUES or isinstance(v, bool):
        raise _bad("soc", v, SOC_VALUES)
    return s


def _norm_mode(v):
    if isinstance(v, int) and not isinstance(v, bool) and v in tuple(RopeMode):
        return RopeMode(v).label
    s = str(v).strip().lower().replace("_", "-")
    if s not in MODES:
        raise _bad("mode", v, MODES + ("or 0..3",))
    return s


def _norm_layout(v):
    s = str(v).strip().upper()
    if s not in LAYOUTS:
        raise _bad("layout", v, LAYOUTS)
    return s


def _norm_cos(v):
    s = str(v).strip().upper()
    if not re.fullmatch(r"[1BNST]{1,3}D", s):
        raise SweepError(f"axis 'cos': {v!r} is not a cos/sin pattern; a pattern spells the "
                         "layout's letters with 1 on broadcast axes, e.g. 11SD, BS1D, T1D")
    return s


def _norm_dtype(v):
    try:
        name = dtype_name(resolve_dtype(str(v)))
    except AclnnError:
        raise _bad("dtype", v, DTYPES) from None
    return name


def _norm_bool(axis):
    def norm(v):
        if isinstance(v, bool):
            return v
        if isinstance(v, int) and v in (0, 1):
            return bool(v)
        if isinstance(v, str) and v.strip().lower() in ("0", "1", "true", "false"):
            return v.strip().lower() in ("1", "true")
        raise _bad(axis, v, ("true", "false", 0, 1))
    return norm


def _norm_dist(v):
    s = str(v).strip().lower().replace("_", "-")
    if s not in DISTRIBUTIONS:
        raise _bad("dist", v, DISTRIBUTIONS)
    return s


def _norm_norm_type(axis):
    names = {"none": 0, "layer_norm": 1, "layernorm": 1, "affine": 2, "affine_layer_norm": 2}

    def norm(v):
        if isinstance(v, int) and not isinstance(v, bool) and v in (0, 1, 2):
            return v
        if isinstance(v, str) and v.strip().lower() in names:
            return names[v.strip().lower()]
        raise _bad(axis, v, ("0 (none)", "1 (layer_norm)", "2 (affine)"))
    return norm


def _norm_rope_type(v):
    if isinstance(v, int) and not isinstance(v, bool) and v in tuple(RopeType):
        return RopeType(v).name.lower()
    s = str(v).strip().lower()
    if s not in ROPE_TYPES:
        raise _bad("rope_type", v, ("none (0)", "interleave (1)", "half (2)"))
    return s


def _norm_concat_order(v):
    if isinstance(v, int) and not isinstance(v, bool) and v in (0, 1):
        return v
    raise _bad("concat_order", v, (0, 1))


_NORMALIZERS = {
    "soc": _norm_soc, "mode": _norm_mode, "layout": _norm_layout, "cos": _norm_cos,
    "dtype": _norm_dtype, "x": _norm_bool("x"), "training": _norm_bool("training"),
    "dist": _norm_dist, "norm_type": _norm_norm_type("norm_type"),
    "norm_added_type": _norm_norm_type("norm_added_type"), "rope_type": _norm_rope_type,
    "concat_order": _norm_concat_order,
}
_DEFAULTS = {"mode": ["half"], "layout": ["BNSD"], "x": [True], "training": [True],
             "dist": ["random"], "fault": ["none"], "norm_type": [0], "norm_added_type": [0],
             "rope_type": ["none"], "concat_order": [0]}
_REQUIRED = ("soc", "dtype", "shape")


def _id_value(axis: str, value) -> str:
    if isinstance(value, bool):
        return str(int(value))
    return str(value)


def _operator(name) -> ops.Operator:
    """The record of an operator named by short id or spec function name (SweepError if none)."""
    op = ops.find(name)
    if op is None or name not in (op.id, op.function):
        raise SweepError(f"op {name!r} unknown; allowed: {', '.join(ops.ids())}")
    return op


def _norm_shape(op: ops.Operator, v) -> dict:
    """A shape value: an inline table ``{B=2, N=8, S=128, D=64}`` or the compact string of the
    record's example (``"B2N8S128D64"``; NormRopeConcat: ``B N Sq Sk Seq Sek D Sr``, Seq/Sek
    default 0 = encoder streams absent, Sr defaults to "min" = min(Sq+Seq, Sk+Sek))."""
    sw = op.sweep
    keys, defaults = sw.shape_keys, sw.shape_defaults
    if isinstance(v, str):
        names = "|".join(sorted(keys, key=len, reverse=True))
        tokens = re.findall(rf"({names})(\d+|[a-z]+)", v.strip())
        if "".join(k + n for k, n in tokens) != v.strip():
            raise SweepError(f"axis 'shape': cannot read {v!r}; write it like "
                             f"'{sw.shape_example}' or as a table {{{keys[0]}=2, ...}}")
        v = {k: (int(n) if n.isdigit() else n) for k, n in tokens}
    if not isinstance(v, dict):
        raise SweepError(f"axis 'shape': {v!r} must be a table such as {{{keys[0]}=2, ...}} "
                         f"or a string such as '{sw.shape_example}'")
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


def _rank(tier_seed: int, tier: str, case_id: str) -> int:
    digest = hashlib.sha256(f"tier:{int(tier_seed)}:{tier}:{case_id}".encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "little")


@dataclass(frozen=True)
class Case:
    """One golden case: its id, operator short name, canonical parameters and seed."""

    id: str
    op: str
    params: dict = field(compare=False, hash=False)
    seed: int = 0
    block: str = ""

    @property
    def function(self) -> str:
        return ops.get(self.op).function


@dataclass
class Tier:
    name: str
    cap: int | None = None
    cover: tuple | None = None          # None: not given (a block override inherits the tier's)
    seed: int | None = None
    description: str = ""
    every: bool = False      # a block override "all": the block's every case


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
_TIER_KEYS = ("cap", "cover", "seed", "description")


def case_params(op: ops.Operator, values: dict, shape: dict) -> dict:
    """Canonical parameters of one case (JSON-able; integers for the documented enums)."""
    return {"op": op.id, **op.sweep.params(values, shape)}


def _constraint_env(op: ops.Operator, values: dict, shape: dict) -> dict:
    return {**values, **shape, **op.sweep.derived(values, shape), "op": op.id}


def _known_names(op: ops.Operator) -> set:
    sw = op.sweep
    return set(sw.axes) | set(sw.shape_keys) | set(sw.derived_names) | {"op"}


def _parse_block(raw, index: int, source: str, tiers: dict) -> Block:
    where = f"{source}: block {index + 1}"
    if not isinstance(raw, dict):
        raise SweepError(f"{where}: must be a table ([[block]])")
    if raw.get("name"):
        where += f" ({raw['name']!r})"
    unknown = sorted(set(raw) - set(_BLOCK_KEYS))
    if unknown:
        raise SweepError(f"{where}: unknown key {unknown[0]!r}; allowed: {', '.join(_BLOCK_KEYS)}")
    try:
        op = _operator(raw.get("op"))
    except SweepError as exc:
        raise SweepError(f"{where}: {exc}") from None
    expect = raw.get("expect", "any")
    if expect not in _EXPECT:
        raise SweepError(f"{where}: expect {expect!r} unknown; allowed: {', '.join(_EXPECT)}")
    axes_raw = raw.get("axes", {})
    if not isinstance(axes_raw, dict):
        raise SweepError(f"{where}: 'axes' must be a table")
    allowed_axes = op.sweep.axes + ("shape",)
    axes = {}
    try:
        for name, values in axes_raw.items():
            if name not in allowed_axes:
                raise SweepError(f"unknown axis {name!r} for op {op.id!r}; allowed: "
                                 f"{', '.join(allowed_axes)}")
            values = values if isinstance(values, list) else [values]
            if not values:
                raise SweepError(f"axis {name!r} has no values")
            if name == "shape":
                axes[name] = [_norm_shape(op, v) for v in values]
            elif name == "fault":
                bad = [v for v in values if v not in op.sweep.faults]
                if bad:
                    raise _bad("fault", bad[0], op.sweep.faults)
                axes[name] = list(values)
            else:
                axes[name] = [_NORMALIZERS[name](v) for v in values]
            if name != "shape" and len(set(axes[name])) != len(axes[name]):
                raise SweepError(f"axis {name!r} lists a value twice: {values!r}")
        for name in _REQUIRED:
            if name not in axes:
                raise SweepError(f"axis {name!r} is required")
        for name in op.sweep.axes:
            if name not in axes:
                axes[name] = list(op.sweep.defaults.get(name, _DEFAULTS.get(name, ())))
                if not axes[name]:
                    raise SweepError(f"axis {name!r} is required for op {op.id!r}")
        try:
            op.sweep.check_axes(axes, set(axes_raw))
        except ValueError as exc:
            raise SweepError(str(exc)) from None
    except SweepError as exc:
        raise SweepError(f"{where}: {exc}") from None

    constraints_raw = raw.get("constraints", {})
    if not isinstance(constraints_raw, dict):
        raise SweepError(f"{where}: 'constraints' must be a table of name = \"expression\"")
    constraints = []
    for name, text in constraints_raw.items():
        try:
            c = Constraint(name, text)
        except ExprError as exc:
            raise SweepError(f"{where}: {exc}") from None
        unknown = sorted(c.names - _known_names(op))
        if unknown:
            raise SweepError(f"{where}: constraint {name!r} uses unknown name {unknown[0]!r}; "
                             f"known: {', '.join(sorted(_known_names(op)))}")
        constraints.append(c)

    overrides = raw.get("tiers", {})
    if not isinstance(overrides, dict):
        raise SweepError(f"{where}: 'tiers' must be a table of tier name = {{cap = N, cover = [...]}}")
    parsed_overrides = {}
    for tname, spec in overrides.items():
        if tname not in tiers:
            raise SweepError(f"{where}: tiers.{tname}: no such tier; defined: "
                             f"{', '.join(tiers) or '(none)'}")
        parsed_overrides[tname] = _parse_tier(tname, spec, f"{where}: tiers.{tname}", block=True)
    block = Block(name=str(raw.get("name") or f"block{index + 1}"), op=op.id, expect=expect,
                  axes=axes, constraints=constraints, tier_overrides=parsed_overrides,
                  source=source)
    try:
        _expand_block(block)
    except SweepError as exc:
        raise SweepError(f"{where}: {exc}") from None
    return block


def _expand_block(block: Block) -> None:
    op = ops.get(block.op)
    names = op.sweep.axes
    seen = set()
    for combo in itertools.product(*(block.axes[n] for n in names)):
        values = dict(zip(names, combo))
        if not op.sweep.admits(values):
            continue
        for shape in block.axes["shape"]:
            shape = op.sweep.complete(values, dict(shape))
            env = _constraint_env(op, values, shape)
            if not all(c(env) for c in block.constraints):
                continue
            parts = [op.id] + [f"{n}={_id_value(n, values[n])}" for n in names
                               if not (n == "fault" and values[n] == "none")]
            case_id = "/".join(parts + [op.sweep.label(shape)])
            if case_id in seen:
                continue
            seen.add(case_id)
            block.cases.append((case_id, case_params(op, values, shape)))


def _parse_tier(name: str, spec, where: str, block: bool = False) -> Tier:
    if block and spec == "all":
        return Tier(name, None, None, None, "every case of the block", every=True)
    if isinstance(spec, int) and not isinstance(spec, bool) and block:
        spec = {"cap": spec}
    if not isinstance(spec, dict):
        raise SweepError(f"{where}: must be a table with cap/cover/seed"
                         + (", a cap, or \"all\"" if block else ""))
    unknown = sorted(set(spec) - set(_TIER_KEYS))
    if unknown:
        raise SweepError(f"{where}: unknown key {unknown[0]!r}; allowed: {', '.join(_TIER_KEYS)}")
    cap = spec.get("cap")
    if cap is not None and (isinstance(cap, bool) or not isinstance(cap, int) or cap < 0):
        raise SweepError(f"{where}: cap {cap!r} must be an integer >= 0")
    cover = [] if "cover" in spec else None
    every_axis = {a for op in ops.OPERATORS.values() for a in op.sweep.axes} | {"shape"}
    for entry in spec.get("cover", []):
        group = tuple(entry) if isinstance(entry, list) else (entry,)
        for a in group:
            if a not in every_axis:
                raise SweepError(f"{where}: cover names unknown axis {a!r}; axes: "
                                 f"{', '.join(sorted(every_axis))}")
        cover.append(group)
    seed = spec.get("seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise SweepError(f"{where}: seed {seed!r} must be an integer")
    return Tier(name, cap, None if cover is None else tuple(cover), seed,
                str(spec.get("description", "")))


_PARAM_OF_AXIS = {"mode": "mode_name", "cos": "cos_pattern", "dist": "distribution",
                  "rope_type": "rope_type_name", "training": "is_training"}


def _cover_key(params: dict, shape_label: str, group: tuple):
    return tuple(shape_label if a == "shape" else params.get(_PARAM_OF_AXIS.get(a, a))
                 for a in group)


def _subsample(block: Block, tier: Tier, sweep_seed: int) -> list[str]:
    """The ids a tier takes from a block: every value combination of each ``cover`` group at
    least once (first case in hash-rank order that brings something new), then the remaining
    cases in rank order up to ``cap``; returned in the block's product order."""
    over = block.tier_overrides.get(tier.name)
    if over is not None and over.every:
        return [cid for cid, _ in block.cases]
    cap = over.cap if over is not None and over.cap is not None else tier.cap
    cover = over.cover if over is not None and over.cover is not None else (tier.cover or ())
    seed = tier.seed if tier.seed is not None else sweep_seed
    ids = [cid for cid, _ in block.cases]
    if cap is None and not cover:
        return ids
    if cap == 0:
        return []
    params = dict(block.cases)
    axes = ops.get(block.op).sweep.axes
    groups = [g for g in cover if all(a in axes or a == "shape" for a in g)]
    ranked = sorted(ids, key=lambda cid: _rank(seed, tier.name, cid))
    chosen, covered = set(), set()
    if groups:
        keys = {cid: {(i, _cover_key(params[cid], cid.rsplit("/", 1)[-1], g))
                      for i, g in enumerate(groups)} for cid in ids}
        every = set().union(*keys.values())
        for cid in ranked:
            if not keys[cid] <= covered:
                chosen.add(cid)
                covered |= keys[cid]
                if len(covered) == len(every):
                    break
    if cap is not None and len(chosen) > cap:
        raise SweepError(f"{block.source}: block {block.name!r}: tier {tier.name!r} needs "
                         f"{len(chosen)} cases to cover {', '.join('+'.join(g) for g in groups)} "
                         f"but its cap is {cap}; raise the cap or cover less")
    for cid in ranked:
        if cap is not None and len(chosen) >= cap:
            break
        chosen.add(cid)
    return [cid for cid in ids if cid in chosen]


class Sweep:
    """A loaded, validated sweep (see the module docstring and docs/sweeps.md)."""

    def __init__(self, *, name, description, seed, default_tier, tiers, blocks, definition,
                 ref, path):
        self.name = name
        self.description = description
        self.seed = seed
        self.default_tier = default_tier
        self.tiers = tiers                  # name -> Tier (without the implicit "all")
        self.blocks = blocks
        self.definition = definition        # TOML text (with included files appended)
        self.ref = ref                      # what to pass to --sweep to load it again
        self.path = path
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
            chosen.update(_subsample(b, self.tiers[tier], self.seed))
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
    tiers = {t: _parse_tier(t, spec, f"{source}: tiers.{t}") for t, spec in tiers_raw.items()}
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
                 default_tier=default_tier, tiers=tiers, blocks=blocks, definition=definition,
                 ref=ref or name, path=path)


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


# --- selecting ------------------------------------------------------------------------------

_FILTERS = {"op": None, "soc": _norm_soc, "dtype": _norm_dtype, "mode": None,
            "layout": _norm_layout}


def normalize_filter(kind: str, value: str):
    """A --op/--soc/--dtype/--mode/--layout value in canonical form, or SweepError."""
    try:
        if kind == "op":
            v = str(value).strip()
            op = ops.find(v)
            if op is None or v not in (op.id, op.function):
                raise _bad("op", value, ops.ids())
            return op.id
        if kind == "mode":
            s = str(value).strip().lower().replace("_", "-")
            if s.isdigit() and int(s) in tuple(RopeMode):
                return RopeMode(int(s)).label
            if s not in MODES + ("none",):
                raise _bad("mode", value, MODES + ("none",))
            return s
        return _FILTERS[kind](value)
    except SweepError as exc:
        raise SweepError(f"--{kind}: {str(exc).split(': ', 1)[1]}") from None


def _filter_value(case, kind: str):
    """The case parameter that a ``--mode``/``--layout`` filter matches (its record names
    it), or None when the operator has none."""
    key = ops.get(case.op).sweep.filters.get(kind)
    return None if key is None else case.params.get(key)


def select_cases(cases, *, ops=(), socs=(), dtypes=(), modes=(), layouts=()) -> list:
    """Cases matching every given filter (each a collection of canonical values; empty = any).
    ``modes`` match RoPE's mode and NormRopeConcat's rope_type by name; ``layouts`` match
    RoPE cases only (NormRopeConcat has fixed BSND/BNSD layouts)."""
    out = []
    for c in cases:
        p = c.params
        if ops and c.op not in ops:
            continue
        if socs and (p["soc"] or "none") not in socs:
            continue
        if dtypes and p["dtype"] not in dtypes:
            continue
        if modes and _filter_value(c, "mode") not in modes:
            continue
        if layouts and _filter_value(c, "layout") not in layouts:
            continue
        out.append(c)
    return out


def parse_shard(text: str) -> tuple[int, int]:
    """'K/N' with 1 <= K <= N."""
    m = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", str(text))
    if not m or not 1 <= int(m.group(1)) <= int(m.group(2)):
        raise SweepError(f"--shard {text!r}: must be K/N with 1 <= K <= N, e.g. 2/8")
    return int(m.group(1)), int(m.group(2))


def shard(cases, k: int, n: int) -> list:
    """Shard K of N: the cases whose index (0-based, in the selected list) mod N == K-1."""
    return [c for i, c in enumerate(cases) if i % n == k - 1]
