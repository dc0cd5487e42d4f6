"""A corpus of broken kernels, each labelled with what its diagnosis should say first: the
measure of refspec's diagnosis on mistakes it was not designed around (docs/compare.md, "How
well the diagnosis does").

Every kernel here is a NumPy implementation of one operator, written from the vendor documents
(docs/rope.md, docs/norm_rope_concat.md, docs/apply_rotary_pos_emb.md,
docs/rope_with_sin_cos_cache.md, docs/interleave_rope.md) the way a device kernel is: inputs
widened to float32 (float64 cases stay float64), float32 arithmetic in its own order (partner
index tables, sums accumulated one term after the other), one rounding to the output dtype.
Each ``BROKEN`` kernel makes one mistake a real kernel makes (an index, a loop bound, a
reduction, a sign, a dtype, a layout, several at once); the ``CORRECT`` kernels make none and
compute in float32, or in the I/O dtype (float16 and bfloat16 arithmetic for 16-bit cases, sums
in float32). Each is a ``refspec run`` implementation of its operator alone:

    refspec run smoke.h5 --impl tests/impls/diagnosis_corpus.py:rg_sin_halves_exchanged --op rope_grad

The argument checks of the chip profile stand in for the aclnn front end (the record's own,
``refspec.ops.get(op).generation.check``), so negative cases pass and only numbers are judged.

Labels
------
A kernel's ``expect`` maps an output name (``None``: every output) to the answers that name its
mistake, any one of them: ``Label(kind, **detail)``. The kinds are the diagnosis's vocabulary
(docs/compare.md, "The vocabulary"); ``unexplained`` never names a mistake. The details a label
asks for, by kind:

- ``alternative``: ``param`` (the attribute, or the input read wrongly: ``sin``, ``x``,
  ``positions``, ``inputs`` for two exchanged) and ``value`` (``half``; ``cos<->sin``; how the
  input was read: ``halves exchanged``, ``pairs exchanged``, ``shifted by one``, ``first row``,
  ``ones``, ``zeros``, another input's name, ``interleaved``);
- ``index``: ``input`` and ``read`` (``halves``, ``pairs``, ``next``: one element ahead,
  ``first row``, ``first S``: the first index along S only); ``input``: ``input`` and
  ``value`` (1: its factor left out, 0: left out, another input's name); ``extent``:
  ``extent`` (``one short``, ``whole head``);
- ``reduction``: ``axes``, the axes the kernel did sum over;
- ``permuted``: ``axis`` and ``how`` (``halves exchanged``, ``interleaved``,
  ``de-interleaved``); ``sign``: ``term`` for the sin term's sign; ``copy``: ``of``;
- ``dtype``: ``as``, the dtype whose bits were written; ``rounding``: ``mode``;
- ``precision``: ``cause``, the arithmetic that explains the errors' size
  (``bfloat16 accumulation``, ``bfloat16 arithmetic``, ``inputs read as float16``, ...); on a
  bfloat16 output a kernel's bfloat16 arithmetic is that output's own, what the correct I/O
  dtype kernel computes too, so there plain ``precision`` (no cause) names it as well
  (``Label.dtypes``); on float16 and float32 outputs only the cause does;
- ``zero``, ``constant``, ``nonfinite``, ``scale``: the kind alone (or ``factor``, ``value``).

Matching rule
-------------
A failing output's first finding names the mistake when, for one of the output's labels, its
``kind`` is the label's and every detail value of the label is among the finding's detail
values (``Finding.detail``, any key): compared as bags of words (lower case, punctuation and
order ignored: ``cos<->sin`` equals ``sin cos``; a list such as ``["B", "N"]`` equals
``B+N``; 1.0 equals 1). A tuple of values is any one of them. The summary's wording never
counts. A correct kernel's failing output is a false bug call when any finding is of a kind
that claims a logic error (anything but ``precision``, ``rounding``, ``unexplained``,
``region``).

``score(golden)`` runs every kernel on a golden file and counts.
"""

from __future__ import annotations

import os
import re
import sys
import time
from dataclasses import dataclass, field
from functools import partial

import ml_dtypes
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from implementations import forward_tables, grad_tables  # noqa: E402

from refspec import ops  # noqa: E402
from refspec.ops.record import Call  # noqa: E402

BF16 = np.dtype(ml_dtypes.bfloat16)
F16, F32, F64 = np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64)

#: finding kinds that do not claim a logic error
NOT_A_BUG = ("precision", "rounding", "unexplained", "region")


# --- labels -----------------------------------------------------------------------------------

def words(value) -> tuple:
    """A detail value as a bag of words: lower-case alphanumeric runs, sorted (lists
    flattened; an integral number as an integer)."""
    if isinstance(value, (list, tuple, set, frozenset)):
        return tuple(sorted(w for v in value for w in words(v)))
    if isinstance(value, (bool, np.bool_)):
        value = str(value)
    elif isinstance(value, (int, float, np.integer, np.floating)):
        v = float(value)
        value = str(int(v)) if v.is_integer() else repr(v)
    return tuple(sorted(re.findall(r"[a-z0-9]+", str(value).lower())))


@dataclass(frozen=True)
class Label:
    """What a finding must say to name a mistake: its ``kind`` and detail values (see the
    module docstring); a tuple value is any one of its entries."""

    kind: str
    detail: tuple = ()
    #: the case's output dtypes the label holds for (empty: every case)
    dtypes: tuple = ()

    def matches(self, kind: str, detail: dict, params: dict | None = None) -> bool:
        """Whether a finding of ``kind`` with ``detail`` says this (``params``: the case's
        parameters, for a value that depends on them)."""
        if kind != self.kind or (self.dtypes and (params or {}).get("dtype") not in self.dtypes):
            return False
        have = {words(v) for v in detail.values()}
        for _, want in self.detail:
            if callable(want):
                want = want(params or {})
            options = want if isinstance(want, tuple) else (want,)
            if not any(words(o) in have for o in options):
                return False
        return True

    def text(self) -> str:
        parts = [self.kind] + [f"{k}={'|'.join(map(str, v)) if isinstance(v, tuple) else v}"
                               if not callable(v) else f"{k}=(from the case's parameters)"
                               for k, v in self.detail]
        return " ".join(parts + [f"(dtype={'|'.join(self.dtypes)} only)"] * bool(self.dtypes))


def label(kind: str, **detail) -> Label:
    return Label(kind, tuple(detail.items()))


# --- arithmetic helpers -----------------------------------------------------------------------

def _work(dtype, arithmetic: str) -> np.dtype:
    """The dtype a kernel's elementwise arithmetic runs in: float32 (float64 for float64
    cases), or the I/O dtype itself (``arithmetic="io"``)."""
    dtype = np.dtype(dtype)
    if dtype == F64:
        return F64
    return dtype if arithmetic == "io" else F32


def _acc(dtype) -> np.dtype:
    """The dtype sums accumulate in: float32 (float64 for float64 cases)."""
    return F64 if np.dtype(dtype) == F64 else F32


def _cast(w, *arrays):
    return tuple(None if a is None else np.asarray(a).astype(w) for a in arrays)


def _through(a, dtype):
    """Values read through a narrower ``dtype`` (rounded to it, back in their own dtype)."""
    return np.asarray(a).astype(dtype).astype(np.asarray(a).dtype)


def _as_float16_bits(out: np.ndarray, dtype) -> np.ndarray:
    """A bfloat16 result written as float16 bits (the wrong cast of a 16-bit store)."""
    if np.dtype(dtype) != BF16:
        return out.astype(dtype)
    with np.errstate(over="ignore"):            # beyond float16's range: its infinity
        return out.astype(np.float32).astype(F16).view(BF16)


def _sum_axes(t: np.ndarray, axes: tuple, acc, sequential_in=None) -> np.ndarray:
    """Sum over ``axes`` keeping them (size 1), terms added one after the other in ``acc``;
    ``sequential_in``: the accumulator is rounded to that dtype after every addition."""
    if not axes:
        return t.astype(acc)
    moved = np.moveaxis(t, axes, tuple(range(len(axes))))
    flat = moved.reshape((-1,) + moved.shape[len(axes):]).astype(acc)
    total = np.zeros(flat.shape[1:], acc)
    for term in flat:
        total = total + term
        if sequential_in is not None:
            total = total.astype(sequential_in).astype(acc)
    return np.expand_dims(total, axes)


def _reduced_axes(full: tuple, table: tuple) -> tuple:
    return tuple(i for i, (f, s) in enumerate(zip(full, table)) if s == 1 and f != 1)


def _reduced_letters(p: dict) -> list:
    """The axes a RotaryPositionEmbeddingGrad case sums dcos over, by letter (where its cos
    pattern has 1 and the layout's size is above 1)."""
    sizes = {"B": p.get("B", 1), "N": p.get("N", 1), "S": p.get("S", 1),
             "T": p.get("B", 1) * p.get("S", 1)}
    return [letter for c, letter in zip(p.get("cos", ""), p.get("layout", ""))
            if c == "1" and sizes[letter] > 1]


def _first_row(t: np.ndarray) -> np.ndarray:
    """A table read with a zero stride on every axis but the last: its first row everywhere."""
    lead = (0,) * (t.ndim - 1)
    return np.broadcast_to(t[lead + (slice(None),)], t.shape)


def _read(m: frozenset, c, s, t, mode: int, exchanged: str, shifted: str):
    """The tables and the rotated tensor as a kernel with the mistakes ``m`` reads them: the
    tables at their first row, cos and sin exchanged (the mistake ``exchanged``), in interleave
    mode the tensor's pairs one element late (``shifted``)."""
    if "tables_first_row" in m:
        c, s = _first_row(c), _first_row(s)
    if exchanged in m:
        c, s = s, c
    if shifted in m and mode == 1:
        t = np.roll(t, -1, axis=-1)
    return c, s, t


def _check(op: str, inputs: dict, attrs: dict, soc) -> None:
    ops.get(op).generation.check(Call(inputs, attrs, soc))


# --- RotaryPositionEmbeddingGrad (docs/rope.md §3) --------------------------------------------

def rope_grad(m: frozenset, arithmetic: str, dy, cos, sin, x=None, mode=0, *, soc=None):
    """dx[o] = cos[A]*dy[A] + sgn*sin[P]*dy[P]; dcos = sum(dy*x[X1]); dsin = sum(dy*s2*x[X2])
    over the axes where cos has 1 (docs/rope.md §3, read element by element)."""
    _check("rope_grad", {"dy": dy, "cos": cos, "sin": sin, "x": x}, {"mode": mode}, soc)
    mode, dt = int(mode), np.asarray(dy).dtype
    w, acc = _work(dt, arithmetic), _acc(dt)
    dy, c, s, xw = _cast(w, dy, cos, sin, x)
    D = dy.shape[-1]
    c, s, dy = _read(m, c, s, dy, mode, "two_cos_sin_half_d", "dy_shifted")
    A, P, sgn = grad_tables(mode, D)
    SI = A if ("sin_own_position" in m and mode == 0) else P
    cb, sb = np.broadcast_to(c, dy.shape), np.broadcast_to(s, dy.shape)
    dx = cb[..., A] * dy[..., A] + sgn.astype(w) * (sb[..., SI] * dy[..., P])
    if "dx_halves_order" in m and mode == 3:
        dx = np.concatenate([dx[..., 0::2], dx[..., 1::2]], axis=-1)
    if "two_cos_sin_half_d" in m:
        dx[..., D // 2:] = 0
    if "dx_last_d_unwritten" in m:
        dx[..., -1] = 0
    out = {"dx": dx}
    if xw is not None:
        X1, X2, s2 = forward_tables(mode, D)
        axes = _reduced_axes(dy.shape, np.shape(cos))
        skipped = ()
        if "reduce_innermost_only" in m and len(axes) > 1:
            axes, skipped = axes[-1:], axes[:-1]
        narrow = BF16 if "dcos_dsin_bf16_accumulation" in m else None
        cos_terms = dy if "dcos_without_x" in m else dy * xw[..., X1]
        for name, terms in (("dcos", cos_terms), ("dsin", dy * (xw[..., X2] * s2.astype(w)))):
            for a in skipped:
                terms = np.take(terms, [0], axis=a)
            out[name] = _sum_axes(terms, axes, acc, narrow)
    if "float16_bits" in m:
        return tuple(None if out.get(k) is None else _as_float16_bits(out[k], dt)
                     for k in ("dx", "dcos", "dsin"))
    return tuple(None if out.get(k) is None else out[k].astype(dt) for k in ("dx", "dcos", "dsin"))


# --- RotaryPositionEmbedding, and the forwards built on it (docs/rope.md §2) -----------------

def rotate(m: frozenset, w, x, c, s, mode: int):
    """y[i] = cos[i]*x[X1[i]] + sin[i]*s2[i]*x[X2[i]] in ``w`` arithmetic."""
    x, c, s = _cast(w, x, c, s)
    D = x.shape[-1]
    c, s, x = _read(m, c, s, x, mode, "cos_sin_exchanged", "x_shifted")
    X1, X2, s2 = forward_tables(mode, D)
    if "sin_sign_flipped" in m:
        s2 = -s2
    cb, sb = np.broadcast_to(c, x.shape), np.broadcast_to(s, x.shape)
    p1, p2 = cb * x[..., X1], sb * (x[..., X2] * s2.astype(w))
    if "products_bf16" in m:
        p1, p2 = _through(p1, BF16), _through(p2, BF16)
    return p1 + p2


def _forward_mode(m: frozenset, mode: int) -> int:
    if "quarter_as_half" in m and mode == 2:
        return 0
    if "interleave_as_half" in m and mode == 1:
        return 0
    return mode


def rope_forward(m: frozenset, arithmetic: str, x, cos, sin, mode=0, *, soc=None):
    _check("rope", {"x": x, "cos": cos, "sin": sin}, {"mode": mode}, soc)
    dt = np.asarray(x).dtype
    y = rotate(m, _work(dt, arithmetic), x, cos, sin, _forward_mode(m, int(mode)))
    if "last_d_unwritten" in m:
        y[..., -1] = 0
    return y.astype(dt)


_TOKEN_AXIS = {"BSND": 1, "SBND": 0, "BNSD": 2, "TND": 0}
_HEAD_AXIS = {"BSND": 2, "SBND": 2, "BNSD": 1, "TND": 1}
_MODES = {"half": 0, "interleave": 1, "quarter": 2}


def _layout_name(layout) -> str:
    names = ("BSND", "SBND", "BNSD", "TND")
    return layout if isinstance(layout, str) else names[int(layout) - 1]


def apply_rope(m: frozenset, arithmetic: str, query, key, cos, sin, layout=1,
               rotary_mode="half", *, soc=None, op="apply_rope"):
    """query and key rotated in place by one table (docs/apply_rotary_pos_emb.md §1-§2)."""
    attrs = {"layout": layout} if op == "apply_rope" else {"layout": layout,
                                                           "rotary_mode": rotary_mode}
    _check(op, {"query": query, "key": key, "cos": cos, "sin": sin}, attrs, soc)
    lay = _layout_name(layout)
    dt = np.asarray(query).dtype
    mode = _forward_mode(m, _MODES[rotary_mode])
    if "inputs_bf16" in m and dt != F64:
        query, key, cos, sin = (_through(t, BF16) for t in (query, key, cos, sin))
    outs = []
    for name, t in (("query", query), ("key", key)):
        y = rotate(m, _work(dt, arithmetic), t, cos, sin, mode)
        last = [slice(None)] * y.ndim
        if "last_token_unrotated" in m or ("two_sin_sign_last_token" in m and name == "query"):
            last[_TOKEN_AXIS[lay]] = slice(-1, None)
            y[tuple(last)] = np.asarray(t)[tuple(last)]
        if "key_last_head_unrotated" in m and name == "key":
            last[_HEAD_AXIS[lay]] = slice(-1, None)
            y[tuple(last)] = np.asarray(t)[tuple(last)]
        outs.append(_as_float16_bits(y, dt) if "float16_bits" in m else y.astype(dt))
    return tuple(outs)


def interleave_rope(m: frozenset, arithmetic: str, x, cos, sin, *, soc=None):
    """q = cat(even(x), odd(x)); y = q*cos + RotateHalf(q)*sin (docs/interleave_rope.md §1)."""
    _check("interleave_rope", {"x": x, "cos": cos, "sin": sin}, {}, soc)
    dt = np.asarray(x).dtype
    xw = np.asarray(x)
    if "no_deinterleave" in m:
        q = xw
    elif "odd_first" in m:
        q = np.concatenate([xw[..., 1::2], xw[..., 0::2]], axis=-1)
    else:
        q = np.concatenate([xw[..., 0::2], xw[..., 1::2]], axis=-1)
    y = rotate(m, _work(dt, arithmetic), q, cos, sin, 0)
    if "written_back_in_pairs" in m:
        h = y.shape[-1] // 2
        y = np.stack([y[..., :h], y[..., h:]], axis=-1).reshape(y.shape)
    if "last_row_unwritten" in m:
        y[..., -1, :] = 0
    return _as_float16_bits(y, dt) if "float16_bits" in m else y.astype(dt)


# --- RopeWithSinCosCache (docs/rope_with_sin_cos_cache.md §1) ---------------------------------

def _cache_rows(m: frozenset, positions, cache, mrope_section):
    """Each token's cos and sin values, (T, R/2) each: the cache rows of its positions (in
    mrope mode section j of the angles from position row j)."""
    pos = np.asarray(positions)
    if "positions_not_gathered" in m:
        pos = np.zeros_like(pos)
    if "mrope_first_row" in m and pos.ndim == 2:
        pos = np.broadcast_to(pos[:1], pos.shape)
    rows = cache[pos]
    half = cache.shape[-1] // 2
    cos, sin = rows[..., :half], rows[..., half:]
    if "cache_halves_exchanged" in m:
        cos, sin = sin, cos
    if mrope_section is not None:
        owner = np.repeat(np.arange(3), list(mrope_section))
        cols = np.arange(half)
        cos, sin = cos[owner, :, cols].T, sin[owner, :, cols].T
    return cos, sin


def rope_cache(m: frozenset, arithmetic: str, positions, query, key, cos_sin_cache, head_size,
               mrope_section=None, is_neox_style=True, *, soc=None):
    """o1 = x1*cos - x2*sin, o2 = x2*cos + x1*sin on the pairs of each head's first rotaryDim
    values (halves for GPT-NeoX, neighbours for GPT-J); the rest of the head copied."""
    _check("rope_cache", {"positions": positions, "query": query, "key": key,
                          "cos_sin_cache": cos_sin_cache},
           {"head_size": head_size, "mrope_section": mrope_section,
            "is_neox_style": is_neox_style}, soc)
    dt = np.asarray(query).dtype
    w = _work(dt, arithmetic)
    cache = np.asarray(cos_sin_cache)
    if "cache_float16" in m and dt != F64:
        cache = _through(cache, F16)
    cos, sin = (t.astype(w)[:, None, :] for t in _cache_rows(m, positions, cache, mrope_section))
    half = cos.shape[-1]
    neox = True if "style_ignored" in m else bool(is_neox_style)
    split = 2 * half
    if "pairing_by_head_size" in m and neox and head_size > 2 * half:
        split = head_size
    i1 = np.arange(half) if neox else 2 * np.arange(half)
    i2 = i1 + split // 2 if neox else i1 + 1
    outs = []
    for x in (query, key):
        heads = np.asarray(x).astype(w).reshape(x.shape[0], -1, head_size)
        out = np.zeros_like(heads) if "pass_through_unwritten" in m else heads.copy()
        x1, x2 = heads[..., i1], heads[..., i2]
        out[..., i1] = x1 * cos - x2 * sin
        out[..., i2] = x2 * cos + x1 * sin
        outs.append(out.reshape(x.shape).astype(dt))
    return tuple(outs)


# --- NormRopeConcatBackward (docs/norm_rope_concat.md §2) --------------------------------------

_STREAMS = (("query", "norm_type", "norm_query", "grad_query_output", "query"),
            ("key", "norm_type", "norm_key", "grad_key_output", "key"),
            ("encoder_query", "norm_added_type", "norm_added_query", "grad_query_output", "query"),
            ("encoder_key", "norm_added_type", "norm_added_key", "grad_key_output", "key"))
_ROPE_MODE = {1: 1, 2: 0}       # ropeType 1 (interleave) is mode 1, ropeType 2 (half) mode 0


def _stream_slice(t: dict, stream: str, main: str, order: int) -> slice:
    """Where a stream lies along the concatenated S (order 0: stream first)."""
    n_main = np.shape(t[main])[1]
    enc = "encoder_" + main
    n_enc = np.shape(t[enc])[1] if t.get(enc) is not None else 0
    if stream == main:
        start = 0 if order == 0 else n_enc
        return slice(start, start + n_main)
    start = n_main if order == 0 else 0
    return slice(start, start + n_enc)


def _rope_grad_rows(m, g, rope_type, rc, rs, w):
    """dx of RotaryPositionEmbeddingGrad at the first Sr positions of a (B, N, L, D)
    gradient; the rest passed through."""
    if not rope_type:
        return g
    Sr = rc.shape[0] - (1 if "sr_off_by_one" in m else 0)
    A, P, sgn = grad_tables(_ROPE_MODE[rope_type], g.shape[-1])
    if "rope_sin_sign_flipped" in m:
        sgn = -sgn
    head = g[:, :, :Sr]
    c, s = (np.broadcast_to(t[None, None, :Sr].astype(w), head.shape) for t in (rc, rs))
    out = g.copy()
    out[:, :, :Sr] = c[..., A] * head[..., A] + sgn.astype(w) * (s[..., P] * head[..., P])
    return out


def _mean_D(t, m):
    """mean_D of the LayerNorm backward (over N instead, with the mistake of that name)."""
    axis = 2 if "mean_over_n" in m else -1
    return t.mean(axis=axis, keepdims=True)


def _weight_sums(m, terms, acc):
    """sum over B, S, N of a (B, S, N, D) tensor: one term after the other."""
    if "weight_grad_n0_only" in m:
        terms = terms[:, :, :1]
    narrow = BF16 if "weight_grads_bf16_accumulation" in m else None
    return _sum_axes(terms, (0, 1, 2), acc, narrow).reshape(-1)


def _ln_backward(m, g, x, mean, rstd, typ, weight, acc):
    xhat = (x - mean) * rstd
    sums = {}
    if typ == 2:
        sums = {"bias": _weight_sums(m, g, acc), "weight": _weight_sums(m, g * xhat, acc)}
        gw = g if "affine_weight_ignored" in m else g * weight
    else:
        gw = g
    dx = rstd * (gw - _mean_D(gw, m) - xhat * _mean_D(gw * xhat, m))
    return dx, sums


def nrc_backward(m: frozenset, arithmetic: str, *, soc=None, norm_type=0, norm_added_type=0,
                 rope_type=0, concat_order=0, **tensors):
    attrs = dict(norm_type=norm_type, norm_added_type=norm_added_type, rope_type=rope_type,
                 concat_order=concat_order)
    _check("nrc_grad", tensors, attrs, soc)
    t = {k: v for k, v in tensors.items() if v is not None}
    dt = np.asarray(t["grad_query_output"]).dtype
    w, acc = _work(dt, arithmetic), _acc(dt)
    D = np.shape(t["query"])[-1]
    rt, order = int(rope_type), int(concat_order)
    rot = {name: _rope_grad_rows(m, np.asarray(t[name]).astype(w), rt, t.get("rope_cos"),
                                 t.get("rope_sin"), w)
           for name in ("grad_query_output", "grad_key_output")}
    out = {}
    for stream, type_attr, prefix, upstream, main in _STREAMS:
        typ = int(attrs[type_attr])
        if typ == 2:
            out[f"grad_{prefix}_weight"] = out[f"grad_{prefix}_bias"] = np.zeros(D, acc)
        if stream not in t:
            continue
        g = rot[upstream][:, :, _stream_slice(t, stream, main, order)].transpose(0, 2, 1, 3)
        if typ == 0:
            out[f"grad_{stream}"] = g
            continue
        x = np.asarray(t[stream]).astype(w)
        mean, rstd = (np.asarray(t[f"{prefix}_{k}"]).astype(w) for k in ("mean", "rstd"))
        weight = np.asarray(t[f"{prefix}_weight"]).astype(w) if typ == 2 else None
        out[f"grad_{stream}"], sums = _ln_backward(m, g, x, mean, rstd, typ, weight, acc)
        for k, v in sums.items():
            out[f"grad_{prefix}_{k}"] = v
    value_source = t["grad_key_output" if "value_from_key" in m else "grad_value_output"]
    for stream, name in (("key", "grad_value"), ("encoder_key", "grad_encoder_value")):
        if stream in t:
            where = _stream_slice(t, stream, "key", order)
            out[name] = np.asarray(value_source)[:, :, where].transpose(0, 2, 1, 3)
    if "bias_weight_swapped" in m:
        for prefix in ("norm_query", "norm_key", "norm_added_query", "norm_added_key"):
            if f"grad_{prefix}_weight" in out:
                out[f"grad_{prefix}_weight"], out[f"grad_{prefix}_bias"] = \
                    out[f"grad_{prefix}_bias"], out[f"grad_{prefix}_weight"]
    return {k: np.ascontiguousarray(v).astype(dt) for k, v in out.items()}


# --- NormRopeConcat (docs/norm_rope_concat.md §1) ----------------------------------------------

def _layer_norm(m, x, typ, weight, bias, eps, acc):
    """LayerNorm over D, statistics in ``acc`` (two passes); (out, mean, rstd)."""
    xa = x.astype(acc)
    mean = xa.mean(axis=-1, keepdims=True)
    rstd = 1 / np.sqrt(((xa - mean) ** 2).mean(axis=-1, keepdims=True) + acc.type(eps))
    xhat = (x - mean.astype(x.dtype)) * rstd.astype(x.dtype)
    if typ == 2:
        xhat = xhat + bias if "affine_weight_ignored" in m else xhat * weight + bias
    return xhat, mean, rstd


def nrc_forward(m: frozenset, arithmetic: str, *, soc=None, norm_type=0, norm_added_type=0,
                rope_type=0, concat_order=0, eps=1e-5, is_training=False, **tensors):
    attrs = dict(norm_type=norm_type, norm_added_type=norm_added_type, rope_type=rope_type,
                 concat_order=concat_order, eps=eps, is_training=is_training)
    _check("nrc", tensors, attrs, soc)
    t = {k: v for k, v in tensors.items() if v is not None}
    if "encoder_streams_swapped" in m and "encoder_query" in t and "encoder_key" in t:
        t["encoder_query"], t["encoder_key"] = t["encoder_key"], t["encoder_query"]
    if "value_from_key" in m:
        t["value"] = t["key"]
    dt = np.asarray(t["query"]).dtype
    w, acc = _work(dt, arithmetic), _acc(dt)
    order = 1 - int(concat_order) if "concat_order_reversed" in m else int(concat_order)
    normed, stats = {}, {}
    for stream, type_attr, prefix, _, _ in _STREAMS:
        if stream not in t:
            continue
        x, typ = np.asarray(t[stream]).astype(w), int(attrs[type_attr])
        if typ == 0:
            normed[stream] = x
            continue
        weight, bias = (np.asarray(t[f"{prefix}_{k}"]).astype(w) if typ == 2 else None
                        for k in ("weight", "bias"))
        normed[stream], mean, rstd = _layer_norm(m, x, typ, weight, bias, float(eps), acc)
        stats[f"{prefix}_mean"], stats[f"{prefix}_rstd"] = mean, rstd
    rc, rs = t.get("rope_cos"), t.get("rope_sin")
    if "tables_bf16" in m and rc is not None and dt != F64:
        rc, rs = _through(rc, BF16), _through(rs, BF16)
    out = {}
    for name, stream, enc in (("query_output", "query", "encoder_query"),
                              ("key_output", "key", "encoder_key"),
                              ("value_output", "value", "encoder_value")):
        a = normed.get(stream, None if t.get(stream) is None else np.asarray(t[stream]).astype(w))
        b = normed.get(enc, None if t.get(enc) is None else np.asarray(t[enc]).astype(w))
        h = a if b is None else np.concatenate((a, b) if order == 0 else (b, a), axis=1)
        h = np.ascontiguousarray(h.transpose(0, 2, 1, 3))
        if name != "value_output" and int(rope_type):
            Sr = rc.shape[0] - (1 if "sr_off_by_one" in m else 0)
            h[:, :, :Sr] = rotate(m, w, h[:, :, :Sr], rc[None, None, :Sr], rs[None, None, :Sr],
                                  _ROPE_MODE[int(rope_type)])
        out[name] = h.astype(dt)
    if is_training:
        out.update({k: v.astype(np.float32) for k, v in stats.items()})
    return out


# --- the corpus -------------------------------------------------------------------------------

_FUNCTIONS = {"rope_grad": rope_grad, "rope": rope_forward, "nrc_grad": nrc_backward,
              "nrc": nrc_forward, "apply_rope": apply_rope,
              "apply_rope_v2": partial(apply_rope, op="apply_rope_v2"),
              "rope_cache": rope_cache, "interleave_rope": interleave_rope}


@dataclass
class Kernel:
    """One kernel of the corpus: its operator, the mistakes it makes (none for a correct
    kernel), a sentence saying them, its arithmetic (``"float32"`` or ``"io"``) and what its
    diagnosis should say first (output name or None -> labels, any of them)."""

    name: str
    op: str
    mistake: str
    mistakes: frozenset = frozenset()
    expect: dict = field(default_factory=dict)
    arithmetic: str = "float32"

    def __getattr__(self, name):
        if name.startswith("_") or name in ("name", "op", "mistakes", "arithmetic"):
            raise AttributeError(name)
        if name != ops.get(self.op).function:
            raise AttributeError(f"{self.name} implements {ops.get(self.op).function} only")
        return partial(_FUNCTIONS[self.op], self.mistakes, self.arithmetic)

    def labels(self, output: str) -> tuple:
        return self.expect.get(output, self.expect.get(None, ()))


def _broken(name, op, mistake, expect, *mistakes) -> Kernel:
    if isinstance(expect, Label):
        expect = {None: (expect,)}
    elif isinstance(expect, tuple):
        expect = {None: expect}
    else:
        expect = {k: (v if isinstance(v, tuple) else (v,)) for k, v in expect.items()}
    return Kernel(name, op, mistake, frozenset(mistakes), expect)


A, R, P = "alternative", "reduction", "precision"
COS_SIN = label(A, param="inputs", value="cos<->sin")
#: a table read at its first row: by name, or as the table's first index along its one
#: leading axis longer than 1 (the same read)
FIRST_ROW = (label(A, param=("cos", "sin", "cos+sin"), value=("first row", "first row only")),
             label("index", input=("cos", "sin"), read=("first row", "first S", "first T",
                                                        "first B", "first N")))
FROM_KEY = (label(A, param="grad_value_output", value="grad_key_output"),
            label("input", input="grad_value_output", value="grad_key_output"))
BOUNDARY = (label(A, value=("boundary off by one", "Sr-1", "off by one")),
            label("extent", extent="one short"))
WEIGHTS = ("norm_query_weight", "norm_key_weight", "norm_added_query_weight",
           "norm_added_key_weight")
WEIGHT_GRADS = tuple(f"output:grad_{w}" for w in WEIGHTS)
BIAS_GRADS = tuple(o.replace("weight", "bias") for o in WEIGHT_GRADS)


def _bf16_cause(how: str) -> tuple:
    """The cause named; on a bfloat16 output plain ``precision`` too (the module docstring)."""
    return label(P, cause=how), Label(P, dtypes=("bfloat16",))


BROKEN_LIST = [
    # RotaryPositionEmbeddingGrad
    _broken("rg_sin_halves_exchanged", "rope_grad",
            "half mode: dx's sin term reads sin at its own position instead of the partner's "
            "(sin1 where sin2 belongs)", {"dx": (label(A, param="sin", value="halves exchanged"),
                                                 label("index", input="sin", read="halves"))},
            "sin_own_position"),
    _broken("rg_dcos_without_x", "rope_grad",
            "dcos accumulated as sum(dy) without its factor x",
            {"dcos": (label(A, param="x", value="ones"), label("input", input="x", value=1),
                      label("copy", of="input:dy"))},
            "dcos_without_x"),
    _broken("rg_reduce_innermost_only", "rope_grad",
            "dcos/dsin summed over the innermost broadcast axis only; the outer ones read at 0",
            label(R, axes=lambda p: _reduced_letters(p)[-1:]), "reduce_innermost_only"),
    _broken("rg_two_cos_sin_half_d", "rope_grad",
            "two mistakes in dx: cos and sin exchanged, and the second half of D never written",
            {"dx": (COS_SIN, label("zero"))}, "two_cos_sin_half_d"),
    _broken("rg_bf16_accumulation", "rope_grad",
            "a float32 kernel accumulating dcos and dsin in bfloat16",
            _bf16_cause("bfloat16 accumulation"), "dcos_dsin_bf16_accumulation"),
    _broken("rg_dx_loop_one_short", "rope_grad",
            "the loop over D stops one element short: dx's last element never written",
            {"dx": label("zero")}, "dx_last_d_unwritten"),
    _broken("rg_interleave_dy_shifted", "rope_grad",
            "interleave mode: dy's pairs read one element late (pairs shifted by one), for dx "
            "and for the sums of dcos and dsin",
            (label(A, param="dy", value="shifted by one"), label("index", input="dy", read="next")),
            "dy_shifted"),
    _broken("rg_tables_first_row", "rope_grad",
            "cos and sin read with a zero stride: their first row for every position",
            {"dx": FIRST_ROW}, "tables_first_row"),
    _broken("rg_dx_halves_order", "rope_grad",
            "interleave-half mode: dx written in halves order, the re-interleave forgotten",
            {"dx": (label("permuted", axis="D", how="de-interleaved"),
                    label(A, param="mode", value="half"))}, "dx_halves_order"),
    _broken("rg_bf16_as_float16_bits", "rope_grad",
            "bfloat16 outputs stored through a float16 cast (float16 bits)",
            label("dtype", **{"as": "float16"}), "float16_bits"),
    # RotaryPositionEmbedding
    _broken("rope_quarter_as_half", "rope", "quarter mode computed with half mode's partners",
            label(A, param="mode", value="half"), "quarter_as_half"),
    _broken("rope_interleave_as_half", "rope",
            "GPT-NeoX style (half) computed where interleave (GPT-J style) is asked",
            label(A, param="mode", value="half"), "interleave_as_half"),
    _broken("rope_x_pairs_shifted", "rope",
            "interleave mode: x's pairs read one element late",
            (label(A, param="x", value="shifted by one"), label("index", input="x", read="next")),
            "x_shifted"),
    _broken("rope_two_sin_sign_last_d", "rope",
            "two mistakes: the sin term's sign flipped, and the last element of D never written",
            (label("sign", term="sin"), label("sign"), label("zero")),
            "sin_sign_flipped", "last_d_unwritten"),
    _broken("rope_products_bf16", "rope",
            "a float32 kernel rounding its products to bfloat16 before adding them",
            _bf16_cause(("bfloat16 arithmetic", "products rounded to bfloat16")), "products_bf16"),
    _broken("rope_tables_first_row", "rope", "cos and sin read at their first row only",
            FIRST_ROW, "tables_first_row"),
    # NormRopeConcatBackward
    _broken("nrcg_affine_weight_ignored", "nrc_grad",
            "affine LayerNorm backward without its weight (gw = g)",
            {None: (label(A, param="norm_type", value=1), label(A, param="norm_added_type", value=1),
                    label(A, param=WEIGHTS, value="ones"), label("input", input=WEIGHTS, value=1))},
            "affine_weight_ignored"),
    _broken("nrcg_sr_off_by_one", "nrc_grad", "RoPE backward on Sr - 1 positions",
            BOUNDARY, "sr_off_by_one"),
    _broken("nrcg_forward_rotation", "nrc_grad",
            "the RoPE backward rotates like the forward (the sin term's sign flipped)",
            (label("sign", term="sin"), label(A, param="inputs", value="rope_cos<->rope_sin")),
            "rope_sin_sign_flipped"),
    _broken("nrcg_weight_grad_n0_only", "nrc_grad",
            "weight and bias gradients summed over B and S only (the head loop missing)",
            # (with B = 1, the sum over B and S is the sum over S)
            label(R, axes=lambda p: ("B+S",) if p.get("B", 1) > 1 else ("B+S", "S")),
            "weight_grad_n0_only"),
    _broken("nrcg_mean_over_n", "nrc_grad",
            "the LayerNorm backward's means taken over N instead of D",
            label(R, axes="N"), "mean_over_n"),
    _broken("nrcg_value_from_key", "nrc_grad", "gradValue split from gradKeyOutput",
            {"grad_value": (*FROM_KEY, label("copy", of="output:grad_key")),
             "grad_encoder_value": (*FROM_KEY, label("copy", of="output:grad_encoder_key"))},
            "value_from_key"),
    _broken("nrcg_bias_weight_swapped", "nrc_grad",
            "the weight and bias gradients written to each other's outputs",
            {**{o[7:]: label("copy", of=b) for o, b in zip(WEIGHT_GRADS, BIAS_GRADS)},
             **{b[7:]: label("copy", of=o) for o, b in zip(WEIGHT_GRADS, BIAS_GRADS)}},
            "bias_weight_swapped"),
    _broken("nrcg_weight_bf16_accumulation", "nrc_grad",
            "weight and bias gradients accumulated in bfloat16",
            _bf16_cause("bfloat16 accumulation"), "weight_grads_bf16_accumulation"),
    # NormRopeConcat
    _broken("nrc_affine_weight_ignored", "nrc", "affine LayerNorm without its weight (xhat + b)",
            (label(A, param=WEIGHTS, value="ones"), label("input", input=WEIGHTS, value=1)),
            "affine_weight_ignored"),
    _broken("nrc_encoder_streams_swapped", "nrc",
            "encoderQuery concatenated to key and encoderKey to query",
            {None: label(A, param="inputs", value="encoder_query<->encoder_key"),
             # each output reads the other encoder stream for its own
             **{f"{a}_output": (label(A, param="inputs", value="encoder_query<->encoder_key"),
                                label("input", input=f"encoder_{a}", value=f"encoder_{b}"))
                for a, b in (("query", "key"), ("key", "query"))},
             **{f"norm_added_{a}_{s}": (label(A, param="inputs", value="encoder_query<->encoder_key"),
                                        label("copy", of=f"output:norm_added_{b}_{s}"))
                for a, b in (("query", "key"), ("key", "query")) for s in ("mean", "rstd")}},
            "encoder_streams_swapped"),
    _broken("nrc_concat_order_reversed", "nrc", "concatOrder read the wrong way round",
            label(A, param="concat_order"), "concat_order_reversed"),
    _broken("nrc_sr_off_by_one", "nrc", "RoPE on Sr - 1 positions", BOUNDARY, "sr_off_by_one"),
    _broken("nrc_value_from_key", "nrc", "valueOutput concatenated from key",
            (label(A, param="value", value="key"), label("input", input="value", value="key"),
             label("copy", of="output:key_output")),
            "value_from_key"),
    _broken("nrc_tables_bf16", "nrc", "a float32 kernel reading ropeCos/ropeSin as bfloat16",
            _bf16_cause(("inputs read as bfloat16",)), "tables_bf16"),
    # ApplyRotaryPosEmb
    _broken("ar_last_token_unrotated", "apply_rope",
            "the loop over tokens stops one short: the last token left as it was (in place)",
            {"query_out": label("copy", of="input:query"), "key_out": label("copy", of="input:key")},
            "last_token_unrotated"),
    _broken("ar_two_sin_sign_last_token", "apply_rope",
            "two mistakes in query: the sin term's sign flipped, the last token left unrotated",
            {"query_out": (label("sign", term="sin"), label("copy", of="input:query")),
             "key_out": label("sign", term="sin")},
            "sin_sign_flipped", "two_sin_sign_last_token"),
    _broken("ar_tables_first_row", "apply_rope", "cos and sin read at their first row only",
            FIRST_ROW, "tables_first_row"),
    _broken("ar_bf16_as_float16_bits", "apply_rope", "bfloat16 outputs stored as float16 bits",
            label("dtype", **{"as": "float16"}), "float16_bits"),
    # ApplyRotaryPosEmbV2
    _broken("ar2_quarter_as_half", "apply_rope_v2", "quarter mode computed as half",
            label(A, param="rotary_mode", value="half"), "quarter_as_half"),
    _broken("ar2_interleave_shifted", "apply_rope_v2",
            "interleave mode: the pairs read one element late",
            {"query_out": (label(A, param="query", value="shifted by one"),
                           label("index", input="query", read="next")),
             "key_out": (label(A, param="key", value="shifted by one"),
                         label("index", input="key", read="next"))}, "x_shifted"),
    _broken("ar2_key_last_head_unrotated", "apply_rope_v2",
            "the loop over key heads stops one short (the last head left as it was)",
            {"key_out": label("copy", of="input:key")}, "key_last_head_unrotated"),
    _broken("ar2_cos_sin_exchanged", "apply_rope_v2", "cos and sin passed the wrong way round",
            COS_SIN, "cos_sin_exchanged"),
    _broken("ar2_inputs_bf16", "apply_rope_v2", "query, key, cos, sin read as bfloat16",
            _bf16_cause(("inputs read as bfloat16",)), "inputs_bf16"),
    # RopeWithSinCosCache
    _broken("rc_style_ignored", "rope_cache", "GPT-NeoX style whatever is_neox_style says",
            label(A, param="style", value="neox"), "style_ignored"),
    _broken("rc_pairing_by_head_size", "rope_cache",
            "rotary_dim < head_size: the halves split at head_size/2, as if the whole head "
            "were rotated", (label(A, value=("whole head", "whole head rotated", "head_size")),
                             label("extent", extent="whole head")),
            "pairing_by_head_size"),
    _broken("rc_mrope_first_row", "rope_cache",
            "mrope: every section's angles from the first position row",
            (label(A, param="positions", value=("first row", "first row only")),
             label("index", input="positions", read=("first row", "read at its first row only"))),
            "mrope_first_row"),
    _broken("rc_positions_not_gathered", "rope_cache",
            "the cache row of position 0 for every token (the gather missing)",
            (label(A, param="positions", value="zeros"),
             label("index", input="cos_sin_cache", read=("first M", "first row"))),
            "positions_not_gathered"),
    _broken("rc_cache_halves_exchanged", "rope_cache",
            "sin taken from the first half of each cache row, cos from the second",
            (label(A, param="cos_sin_cache", value=("halves exchanged", "cos<->sin")),
             label(A, param="inputs", value="cos<->sin")),
            "cache_halves_exchanged"),
    _broken("rc_cache_float16", "rope_cache", "the cos/sin cache read as float16",
            label(P, cause="inputs read as float16"), "cache_float16"),
    _broken("rc_pass_through_unwritten", "rope_cache",
            "rotary_dim < head_size: the part after rotary_dim never written (zeros)",
            label("zero"), "pass_through_unwritten"),
    # InterleaveRope
    _broken("ir_written_back_in_pairs", "interleave_rope",
            "y written back in pair order (re-interleaved)",
            label("permuted", axis="D", how=("interleaved", "pairs interleaved",
                                             "pairs interleaved (2i takes i, 2i + 1 takes i + h/2)")),
            "written_back_in_pairs"),
    _broken("ir_no_deinterleave", "interleave_rope", "x rotated half without its pairs taken apart",
            (label(A, param="x", value=("interleaved", "pairs interleaved", "halves interleaved")),
             label("index", input="x", read=("interleaved", "halves interleaved"))),
            "no_deinterleave"),
    _broken("ir_odd_first", "interleave_rope", "the pairs taken apart odd positions first",
            (label(A, param="x", value="pairs exchanged"), label("index", input="x", read="pairs")),
            "odd_first"),
    _broken("ir_sin_sign_flipped", "interleave_rope", "rotated by -theta (sin's sign)",
            label("sign", term="sin"), "sin_sign_flipped"),
    _broken("ir_bf16_as_float16_bits", "interleave_rope", "bfloat16 stored as float16 bits",
            label("dtype", **{"as": "float16"}), "float16_bits"),
    _broken("ir_rows_one_short", "interleave_rope",
            "the loop over S stops one short: the last row never written", label("zero"),
            "last_row_unwritten"),
]

BROKEN = {k.name: k for k in BROKEN_LIST}
CORRECT = {f"{op}_correct_{a}": Kernel(f"{op}_correct_{a}", op,
                                       f"correct, {'float32' if a == 'float32' else 'I/O dtype'} "
                                       "arithmetic", arithmetic=a)
           for op in _FUNCTIONS for a in ("float32", "io")}
globals().update(BROKEN)
globals().update(CORRECT)


# --- the score --------------------------------------------------------------------------------

@dataclass
class Row:
    """One failing output of a corpus kernel and what its diagnosis said first."""

    kernel: str
    op: str
    output: str
    case_id: str
    first: str            # "kind: summary" of the first finding, "" when none
    named: bool
    false_bug: bool


@dataclass
class Score:
    rows: list = field(default_factory=list)
    silent_kernels: list = field(default_factory=list)   # broken kernels that fail nothing
    seconds: float = 0.0

    def broken(self) -> list:
        return [r for r in self.rows if r.kernel in BROKEN]

    def correct(self) -> list:
        return [r for r in self.rows if r.kernel not in BROKEN]

    @property
    def named(self) -> float:
        rows = self.broken()
        return sum(r.named for r in rows) / max(len(rows), 1)

    @property
    def empty(self) -> float:
        return sum(not r.first for r in self.rows) / max(len(self.rows), 1)

    @property
    def false_bugs(self) -> int:
        return sum(r.false_bug for r in self.correct())

    @property
    def named_per_kernel(self) -> float:
        """The mean over the broken kernels of the share of their failing outputs named (each
        mistake counts once, however many outputs it breaks)."""
        shares = [a / n for a, n in self.per_kernel().values()]
        return sum(shares) / max(len(shares), 1)

    def per_kernel(self) -> dict:
        """kernel -> (named, failing outputs)."""
        out: dict = {}
        for r in self.broken():
            named, n = out.get(r.kernel, (0, 0))
            out[r.kernel] = (named + r.named, n + 1)
        return out


def judge(kernel: Kernel, golden: str, **options):
    """The comparator's report of one kernel on the cases of its operator."""
    from refspec.comparator import Implementation, compare
    return compare(golden, Implementation(f"{__file__}:{kernel.name}", repeat=0),
                   operators=[kernel.op], **options)


def rows_of(kernel: Kernel, report) -> list[Row]:
    rows = []
    for r in report.results:
        if r.status != "fail" or r.output == "(status)":
            continue
        first = r.diagnosis[0] if r.diagnosis else None
        labels = kernel.labels(r.output)
        named = first is not None and any(lb.matches(first.kind, first.detail, r.params)
                                          for lb in labels)
        false_bug = not kernel.mistakes and any(f.kind not in NOT_A_BUG for f in r.diagnosis)
        rows.append(Row(kernel.name, kernel.op, r.output, r.case_id,
                        first.line() if first else "", named, false_bug))
    return rows


def score(golden: str, kernels=None, **options) -> Score:
    """Every kernel (default: the whole corpus, broken and correct) on ``golden``."""
    kernels = list(kernels) if kernels is not None else [*BROKEN.values(), *CORRECT.values()]
    out = Score()
    t0 = time.perf_counter()
    for k in kernels:
        rows = rows_of(k, judge(k, golden, **options))
        if k.mistakes and not rows:
            out.silent_kernels.append(k.name)
        out.rows += rows
    out.seconds = time.perf_counter() - t0
    return out
