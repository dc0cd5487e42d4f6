"""Deterministic input distributions of the golden cases (docs/sweeps.md, "Distributions").

Each operator record samples its inputs from these (refspec.ops.rope_records, refspec.ops.nrc_records).

Every tensor is drawn in float64 from its own random stream (the case seed plus a hash of the
tensor's name, so adding or removing one tensor never changes another) and rounded once to the
case dtype with ``refspec.dtypes.round_to``: the stored inputs are exactly what a kernel
consumes, and the expected outputs are computed from them.

Distributions (the ``dist`` axis of a sweep):

``random`` (default)
    independent values: data and upstream gradients N(0, 1); cos/sin tables from an
    independent angle per element (so the two halves and the members of a pair differ, which
    exposes wrong-partner and swapped-half bugs); weights U(0.5, 1.5), biases N(0, 1).
``rotary``
    realistic tables ``angle = position * base^(-2i/D)`` (base 10000) paired for the mode:
    duplicated halves (half, interleave-half; quarter: per half), duplicated pairs (interleave);
    data and gradients N(0, 1); weights near 1, biases near 0.
``vendor``
    the ranges of the vendor's scripts (docs/rope.md, docs/norm_rope_concat.md), given by the
    record as a ``Vendor``: RoPE x, dy U(-2, 2), cos U(-3, 4), sin U(-4, 5)
    (``ROPE_VENDOR``); NormRopeConcat every tensor ``randn*10 - 5`` and the table
    ``angle[p, d] = p / 10000^(d/D)`` (``NRC_VENDOR``).
``position-coded``
    each element encodes its own flat C-order index (modulo a period of 2^(p+1), p = the
    dtype's significand bits) in a value exactly representable in the dtype; see
    ``position_code`` / ``position_decode``.
``special``
    a quarter each of signed zeros, subnormals of the dtype, large magnitudes and ordinary
    values; the large magnitude of each tensor is chosen by the caller from worst-case bounds so
    that the exact outputs stay below the dtype's maximum where possible.
"""

from __future__ import annotations

import hashlib
from typing import NamedTuple

import ml_dtypes
import numpy as np

from ..spec.dtypes import resolve_dtype, round_to
from ..spec.quant_dtypes import decode, is_quant_dtype

__all__ = ["DISTRIBUTIONS", "ROLES", "PAIRINGS", "ROPE_BASE", "Vendor", "ROPE_VENDOR",
           "NRC_VENDOR", "stream", "draw", "draw_tables", "rotary_angles", "position_code",
           "position_decode", "position_period", "significand_bits", "dtype_max",
           "smallest_subnormal", "sentinels"]

DISTRIBUTIONS = ("random", "rotary", "vendor", "position-coded", "special")
#: what a tensor is to the operator: it decides the value range of most distributions (tables
#: and statistics are made by the records from the other inputs, not drawn; a cache the call
#: updates in place holds sentinel values, ``sentinels``, whatever the distribution)
ROLES = ("data", "grad", "weight", "bias", "table", "stats", "cache")
#: how the frequencies of a rotary table repeat along D
PAIRINGS = ("half", "interleave", "quarter", "element")
ROPE_BASE = 10000.0


class Vendor(NamedTuple):
    """What an operator's vendor scripts draw: ``data`` ("uniform", low, high) or ("normal",
    scale, shift) for every drawn tensor; ``tables`` the (cos, sin) uniform ranges, or None for
    a rotary table with a distinct frequency per element (from the positions)."""

    data: tuple
    tables: tuple | None


#: RotaryPositionEmbedding(Grad) test scripts: x, dy U(-2, 2), cos U(-3, 4), sin U(-4, 5)
ROPE_VENDOR = Vendor(("uniform", -2.0, 2.0), (("uniform", -3.0, 4.0), ("uniform", -4.0, 5.0)))
#: NormRopeConcat(Grad) golden script: randn*10 - 5, angle[p, d] = p / 10000^(d/D)
NRC_VENDOR = Vendor(("normal", 10.0, -5.0), None)


def significand_bits(dtype) -> int:
    """Significand bits including the implicit one (float16 11, bfloat16 8, float32 24, ...)."""
    dt = resolve_dtype(dtype)
    return int(ml_dtypes.finfo(dt).nmant) + 1


def dtype_max(dtype) -> float:
    return float(ml_dtypes.finfo(resolve_dtype(dtype)).max)


def smallest_subnormal(dtype) -> float:
    dt = resolve_dtype(dtype)
    return float(ml_dtypes.finfo(dt).smallest_subnormal)


def stream(seed: int, name: str) -> np.random.Generator:
    """The random stream of one tensor of a case: SeedSequence(seed, spawn_key=hash(name))."""
    key = int.from_bytes(hashlib.sha256(name.encode("utf-8")).digest()[:4], "little")
    return np.random.default_rng(np.random.SeedSequence(int(seed), spawn_key=(key,)))


# --- position-coded values --------------------------------------------------------------------

def _code_params(dtype, name: str):
    p = min(significand_bits(dtype), 30)
    period = 2 << p                                   # 2^(p+1) codes: k in 1..2^p, two signs
    offset = int.from_bytes(hashlib.sha256(name.encode("utf-8")).digest()[:8], "little") % period
    return p, period, offset


def position_period(dtype) -> int:
    """How many consecutive flat indices have distinct codes in ``dtype``."""
    return _code_params(dtype, "")[1]


def position_code(shape, dtype, name: str) -> np.ndarray:
    """Values that encode their flat C-order index i: with p significand bits, j = (i + o) mod
    2^(p+1) (o derived from the tensor name, so tensors differ), k = (j mod 2^p) + 1, value =
    ±k * 2^-(p-2) (negative when j >= 2^p). Every value is exact in the dtype and lies in
    [2^-(p-2), 4] in magnitude."""
    dt = resolve_dtype(dtype)
    p, period, offset = _code_params(dt, name)
    n = int(np.prod(shape, dtype=np.int64))
    i = np.arange(min(n, period), dtype=np.int64)
    j = (i + offset) % period
    half = period // 2
    k = (j % half + 1).astype(np.float64)
    values = round_to(np.where(j >= half, -k, k) * 2.0 ** -(p - 2), dt)
    return _cycle(values, n).reshape(shape)


def _cycle(one_period: np.ndarray, n: int) -> np.ndarray:
    """The first ``n`` elements of ``one_period`` repeated (the codes of element i depend on i
    modulo the period only: a large cache costs one period's arithmetic and a copy)."""
    if n <= len(one_period):
        return one_period[:n]
    return np.tile(one_period, -(-n // len(one_period)))[:n]


def position_decode(values, dtype, name: str) -> np.ndarray:
    """Inverse of ``position_code``: the flat index of each value modulo the period."""
    dt = resolve_dtype(dtype)
    p, period, offset = _code_params(dt, name)
    v = np.asarray(values).astype(np.float64)
    k = np.rint(np.abs(v) * 2.0 ** (p - 2)).astype(np.int64)
    j = (k - 1) + np.where(v < 0, period // 2, 0)
    return (j - offset) % period


def sentinels(shape, dtype, name: str) -> np.ndarray:
    """The values a cache holds before a call (role ``cache``): every element encodes its flat
    index, so a value written to the wrong slot, or a slot changed that the index does not name,
    shows. Float caches hold ``position_code``'s values (distinct over 2^(p+1) elements);
    int8 and the 8-bit float caches cycle through their finite non-zero codes from an offset
    derived from the tensor's name (distinct over 255 or the format's finite codes)."""
    shape = tuple(int(s) for s in shape)
    dt = np.dtype(dtype)
    if not is_quant_dtype(dt):
        return position_code(shape, dt, name)
    codes = np.arange(256, dtype=np.uint8)
    values = decode(codes.view(dt))
    usable = codes[np.isfinite(values) & (values != 0)]
    offset = _code_params(np.float16, name)[2]
    n = int(np.prod(shape, dtype=np.int64))
    one_period = usable[(np.arange(len(usable)) + offset) % len(usable)]
    return _cycle(one_period, n).reshape(shape).view(dt)


# --- special values ---------------------------------------------------------------------------

def _categories(shape, dt, rng) -> tuple:
    """What both ``special`` draws start with: the element count, a category 0-3 per element
    (a quarter each, shuffled), a random sign per element, and the dtype's subnormals as
    ``k * tiny`` for 1 <= k < steps."""
    n = int(np.prod(shape, dtype=np.int64))
    category = rng.permutation(np.arange(n) % 4)
    sign = np.where(rng.random(n) < 0.5, -1.0, 1.0)
    return n, category, sign, smallest_subnormal(dt), 2 ** (significand_bits(dt) - 1)


def _special(shape, dt, rng, large: float) -> np.ndarray:
    """A quarter each: signed zeros, subnormals, large (|v| in [large/2, large]) and ordinary
    values (|v| <= min(1, large)); the categories are shuffled over the elements."""
    n, category, sign, tiny, steps = _categories(shape, dt, rng)
    out = np.empty(n)
    zero = category == 0
    out[zero] = 0.0
    sub = category == 1
    out[sub] = rng.integers(1, steps, int(sub.sum())) * tiny
    big = category == 2
    out[big] = rng.uniform(0.5, 1.0, int(big.sum())) * large
    normal = category == 3
    out[normal] = rng.uniform(0.0, 1.0, int(normal.sum())) * min(1.0, large)
    return round_to((sign * out).reshape(shape), dt)


def _special_table(shape, dt, rng) -> np.ndarray:
    """Table entries for ``special``: signed zeros, subnormals, exactly ±1 and U(-1, 1)."""
    n, category, sign, tiny, steps = _categories(shape, dt, rng)
    out = np.select([category == 0, category == 1, category == 2],
                    [0.0, rng.integers(1, steps, n) * tiny, 1.0], rng.uniform(0.0, 1.0, n))
    return round_to((sign * out).reshape(shape), dt)


def default_large(dtype) -> float:
    """The large magnitude used when the caller gives none: a quarter of the dtype's maximum."""
    return dtype_max(dtype) / 4


# --- drawing ----------------------------------------------------------------------------------

def _vendor_values(rng: np.random.Generator, how: tuple, shape) -> np.ndarray:
    kind, a, b = how
    if kind == "uniform":
        return rng.uniform(a, b, shape)
    return rng.standard_normal(shape) * a + b


def draw(dist: str, role: str, shape, dtype, seed: int, name: str, *,
         vendor: Vendor = ROPE_VENDOR, large: float | None = None) -> np.ndarray:
    """One input tensor of ``shape`` in ``dtype`` (values exactly what is stored).

    ``role`` is one of ``ROLES``; ``vendor`` gives the ranges of ``vendor``; ``large`` is
    the large magnitude of the ``special`` distribution for this tensor.
    """
    if role == "cache":
        return sentinels(shape, dtype, name)
    dt = resolve_dtype(dtype)
    shape = tuple(int(s) for s in shape)
    if dist == "position-coded":
        return position_code(shape, dt, name)
    rng = stream(seed, name)
    if dist == "special":
        if role == "weight":
            return _special_table(shape, dt, rng)
        return _special(shape, dt, rng, default_large(dt) if large is None else float(large))
    if dist == "vendor":
        return round_to(_vendor_values(rng, vendor.data, shape), dt)
    if dist in ("random", "rotary"):
        if role == "weight":
            v = rng.uniform(0.5, 1.5, shape) if dist == "random" else 1 + 0.1 * rng.standard_normal(shape)
        elif role == "bias":
            v = rng.standard_normal(shape) * (1.0 if dist == "random" else 0.1)
        else:
            v = rng.standard_normal(shape)
        return round_to(v, dt)
    raise ValueError(f"unknown distribution {dist!r}; allowed: {', '.join(DISTRIBUTIONS)}")


def rotary_angles(positions, D: int, pairing: str, base: float = ROPE_BASE) -> np.ndarray:
    """Angles of a realistic rotary table: ``positions`` (any shape ending in 1) times the
    frequencies base^(-2i/D) laid out for ``pairing``:

    - ``half``: angle[i] = angle[i + D/2] = pos * base^(-2i/D), i < D/2;
    - ``interleave``: angle[2i] = angle[2i+1] = pos * base^(-2i/D);
    - ``quarter``: each half of D is a half-paired table of size D/2;
    - ``element``: a distinct frequency per element, angle[d] = pos / base^(d/D) (the vendor's
      NormRopeConcat script).
    """
    pos = np.asarray(positions, dtype=np.float64)
    if pairing == "half":
        freq = base ** (-2.0 * np.arange(D // 2) / D)
        f = np.concatenate([freq, freq])
    elif pairing == "interleave":
        freq = base ** (-2.0 * np.arange(D // 2) / D)
        f = np.repeat(freq, 2)
    elif pairing == "quarter":
        h = D // 2
        freq = base ** (-2.0 * np.arange(h // 2) / h)
        f = np.concatenate([freq, freq, freq, freq])
    elif pairing == "element":
        return pos / base ** (np.arange(D) / D)           # the vendor script's p / 10000^(d/D)
    else:
        raise ValueError(f"unknown pairing {pairing!r}; allowed: {', '.join(PAIRINGS)}")
    return pos * f


def draw_tables(dist: str, shape, dtype, seed: int, *, positions=None, pairing: str = "half",
                vendor: Vendor = ROPE_VENDOR, names=("cos", "sin")) -> tuple[np.ndarray, np.ndarray]:
    """The (cos, sin) pair of ``shape`` in ``dtype``.

    ``positions`` (shape ``shape[:-1] + (1,)``) and ``pairing`` matter for ``rotary`` (and for
    a ``vendor`` table without ranges, which uses ``element`` pairing).
    """
    dt = resolve_dtype(dtype)
    shape = tuple(int(s) for s in shape)
    D = shape[-1]
    cos_name, sin_name = names
    if dist == "position-coded":
        return position_code(shape, dt, cos_name), position_code(shape, dt, sin_name)
    if dist == "special":
        return (_special_table(shape, dt, stream(seed, cos_name)),
                _special_table(shape, dt, stream(seed, sin_name)))
    if dist == "random":
        angle = stream(seed, cos_name).uniform(-np.pi, np.pi, shape)
        return round_to(np.cos(angle), dt), round_to(np.sin(angle), dt)
    if dist == "vendor" and vendor.tables is not None:
        return tuple(round_to(_vendor_values(stream(seed, n), how, shape), dt)
                     for n, how in zip(names, vendor.tables))
    if dist in ("rotary", "vendor"):
        if positions is None:
            raise ValueError("rotary tables need positions")
        angle = np.broadcast_to(rotary_angles(positions, D, "element" if dist == "vendor" else pairing),
                                shape)
        return round_to(np.cos(angle), dt), round_to(np.sin(angle), dt)
    raise ValueError(f"unknown distribution {dist!r}; allowed: {', '.join(DISTRIBUTIONS)}")

