"""Shared helpers for the tests of the executable spec (shapes, cases, inner products, errors).

Nothing here computes any operator math: the helpers only build inputs, enumerate the documented
layouts and cos/sin broadcast patterns, and check error objects.
"""

from __future__ import annotations

import itertools
import math
import re

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import refspec
from refspec.spec.nrc_checks import STREAMS

#: logical sizes used to lay problems out (all distinct, so a swapped axis cannot hide)
B, N, S = 2, 3, 5

#: the four 4-D-or-TND layouts of docs/rope.md §4
LAYOUTS = ("BNSD", "BSND", "SBND", "TND")

#: for 4-D tensors, every combination of "leading cos axis is 1 / equals dy's" (8 patterns)
KEEP_4D = tuple(itertools.product((False, True), repeat=3))
#: for TND tensors, every combination over (T, N): 11D, 1ND, T1D, TND
KEEP_3D = tuple(itertools.product((False, True), repeat=2))


def full_shape(layout: str, D: int, b: int = B, n: int = N, s: int = S) -> tuple[int, ...]:
    """Shape of a (b, n, s, D) problem in ``layout`` (TND packs b*s tokens)."""
    return refspec.spec.layouts.layout_shape(layout, b, n, s, D)


def cos_shape(shape, keep) -> tuple[int, ...]:
    """cos/sin shape that keeps the leading axes flagged in ``keep`` and is 1 elsewhere."""
    return tuple(size if k else 1 for size, k in zip(shape[:-1], keep)) + (shape[-1],)


def pattern_label(layout: str, keep) -> str:
    """Name of a pattern in a layout, e.g. '11SD' for BNSD keeping only S."""
    letters = layout[:-1]
    return "".join(letter if k else "1" for letter, k in zip(letters, keep)) + "D"


def rope_cases(D: int):
    """(layout, dy shape, cos shape, pattern label) for every layout and every pattern."""
    for layout in LAYOUTS:
        shape = full_shape(layout, D)
        for keep in (KEEP_3D if layout == "TND" else KEEP_4D):
            yield layout, shape, cos_shape(shape, keep), pattern_label(layout, keep)


def rope_case_params(D: int):
    return [pytest.param(layout, shape, cshape, id=f"{layout}-{label}")
            for layout, shape, cshape, label in rope_cases(D)]


def bits(a) -> np.ndarray:
    """The raw bits of a float array (so that -0.0 and 0.0, or NaN payloads, differ)."""
    a = np.ascontiguousarray(a)
    return a.view({2: np.uint16, 4: np.uint32, 8: np.uint64}[a.dtype.itemsize])


def nasty(rng, shape, dtype=np.float32) -> np.ndarray:
    """Values whose sums depend on their order: a wide dynamic range, signed zeros and exact
    cancellations, in ``dtype``."""
    span = 25 if np.dtype(dtype) in (np.float32, np.float64) else 5
    a = (rng.standard_normal(shape) * np.exp(rng.uniform(-span, span, shape))).astype(dtype)
    flat = a.reshape(-1)
    flat[::7] = -0.0
    flat[3::11] = 0.0
    return a


def inner(a, b) -> float:
    """<a, b> summed accurately (math.fsum) in float64."""
    return math.fsum((np.asarray(a, np.float64) * np.asarray(b, np.float64)).ravel())


def abs_inner(a, b) -> float:
    """<|a|, |b|>: the scale against which a float64 inner product's rounding is judged."""
    return math.fsum(np.abs(np.asarray(a, np.float64) * np.asarray(b, np.float64)).ravel())


def assert_aclnn(excinfo, cls, code: int, argument: str) -> None:
    """The raised error is ``cls`` with the aclnn ``code`` and a message that names ``argument``
    first, as ``<argument>: ...`` (checks.py message format)."""
    err = excinfo.value
    assert type(err) is cls, f"{type(err).__name__} raised, expected {cls.__name__}: {err}"
    assert isinstance(err, refspec.AclnnError)
    assert err.code == code
    assert re.match(rf"{re.escape(argument)}: ", str(err)), f"message does not name {argument!r}: {err}"


# --- NormRopeConcat cases -------------------------------------------------------------------

#: every (norm_type, norm_added_type, rope_type, concat_order): 3*3*3*2 = 54
NRC_ATTRS = tuple(itertools.product((0, 1, 2), (0, 1, 2), (0, 1, 2), (0, 1)))

#: stream -> (norm-type attribute, weight, bias, mean, rstd) as named in the API (a naming
#: table: a wrong name would be an unknown keyword of the public functions)
NRC_STREAMS = STREAMS


def attrs_dict(norm_type, norm_added_type, rope_type, concat_order) -> dict:
    return dict(norm_type=norm_type, norm_added_type=norm_added_type, rope_type=rope_type,
                concat_order=concat_order)


def nrc_forward_inputs(rng, *, b=2, n=2, d=6, sq=3, seq=2, sk=4, sek=3, sr=None, rope_type=0,
                       weights=True, dtype=np.float64, scale=2.0) -> dict:
    """Forward tensors by parameter name (seq=0 / sek=0: that encoder stream absent).

    Weights and biases are drawn for all four normed streams when ``weights``; the rope tables
    (sr rows) when ``rope_type`` != 0 (sr defaults to min(Sq+Seq, Sk+Sek)). Values are random
    with distinct halves and pairs, so no index bug can cancel out.
    """
    def draw(*shape):
        return (rng.uniform(-scale, scale, shape)).astype(dtype)

    t = dict(query=draw(b, sq, n, d), key=draw(b, sk, n, d), value=draw(b, sk, n, d))
    if seq:
        t["encoder_query"] = draw(b, seq, n, d)
    if sek:
        t["encoder_key"] = draw(b, sek, n, d)
        t["encoder_value"] = draw(b, sek, n, d)
    if weights:
        for _attr, w, bias, _m, _r in NRC_STREAMS.values():
            t[w] = draw(d)
            t[bias] = draw(d)
    if rope_type:
        sr = min(sq + seq, sk + sek) if sr is None else sr
        angle = rng.uniform(-3.0, 3.0, (sr, d))
        t["rope_cos"] = (np.cos(angle) * rng.uniform(0.5, 1.5, (sr, d))).astype(dtype)
        t["rope_sin"] = (np.sin(angle) * rng.uniform(0.5, 1.5, (sr, d))).astype(dtype)
    return t


BACKWARD_TENSORS = ("query", "key", "encoder_query", "encoder_key", "rope_sin", "rope_cos",
                    "norm_query_weight", "norm_key_weight", "norm_added_query_weight",
                    "norm_added_key_weight")


def nrc_backward_kwargs(fwd_inputs: dict, fwd_outputs, grads: dict, attrs: dict) -> dict:
    """Backward keyword arguments: the forward's inputs it takes, the statistics the forward
    emitted (is_training=True) for the normed streams, and the three output gradients."""
    kw = {name: fwd_inputs[name] for name in BACKWARD_TENSORS if name in fwd_inputs}
    for stream, (attr, _w, _b, mean, rstd) in NRC_STREAMS.items():
        if stream in fwd_inputs and attrs[attr] >= 1:
            kw[mean] = getattr(fwd_outputs, mean)
            kw[rstd] = getattr(fwd_outputs, rstd)
    kw.update(grads)
    kw.update(attrs)
    return kw


# --- the KV-cache operators' fuzz tests ---------------------------------------------------------

#: the settings of the KV-cache operators' fuzz tests (each example builds a small case)
FUZZ = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
#: what a fuzz test of a KV-cache operator puts in place of one argument of a valid call
JUNK_ARGUMENTS = (None, 0, "x", [1, 2, 3], np.zeros(3), np.zeros((2, 2), np.int8),
                  np.array([object()], dtype=object))


def with_junk(draw, kw: dict, socs) -> dict:
    """The arguments ``kw`` of a valid call with one of them replaced by junk (or kept), and a
    chip profile of ``socs`` (``draw``: hypothesis's, in a composite strategy)."""
    name = draw(st.sampled_from(sorted(kw)))
    kw[name] = draw(st.sampled_from([*JUNK_ARGUMENTS, kw[name]]))
    kw["soc"] = draw(st.sampled_from(socs))
    return kw


def assert_aclnn_error_or_caches(fn, kw: dict) -> None:
    """``fn(**kw)`` raises an AclnnError, or returns each ``*_cache`` argument updated: an array
    of that argument's shape and dtype."""
    try:
        out = fn(**kw)
    except refspec.AclnnError:
        return
    caches = [n for n in kw if n.endswith("_cache") and n in out._fields]
    assert caches
    for name in caches:
        got, given = getattr(out, name), np.asarray(kw[name])
        assert got.shape == given.shape and got.dtype == given.dtype, name


def fuzz_test(fn, calls):
    """A test that every example of ``calls`` (a strategy of keyword arguments, ``with_junk``'s)
    raises an AclnnError from ``fn`` or returns its caches updated."""
    @FUZZ
    @given(calls)
    def test(kw):
        assert_aclnn_error_or_caches(fn, kw)
    return test


def valid_call(case, seed: int, soc: str, *args):
    """``base(**changes)``: the keyword arguments ``case(rng, *args, **changes["case"])`` builds
    (``rng`` seeded with ``seed``), on the chip ``soc``, with the other ``changes`` applied: the
    valid call each rejection test changes one thing of."""
    def base(**changes):
        kw = case(np.random.default_rng(seed), *args, **changes.pop("case", {}))
        return {**kw, "soc": soc, **changes}
    return base


def assert_rejected(fn, kw: dict, cls, code: int, argument: str) -> None:
    """``fn(**kw)`` raises ``cls`` with the aclnn ``code``, naming ``argument``."""
    with pytest.raises(refspec.AclnnError) as excinfo:
        fn(**kw)
    assert_aclnn(excinfo, cls, code, argument)
