"""Grids of in-memory golden cases built with the spec functions (every RoPE mode, layout,
broadcast pattern and dtype; every NormRopeConcat attribute combination), and the device-like
implementations of tests/impls/implementations.py run on them. Nothing here computes operator
math itself: the cases come from refspec.comparator.spec_case, the outputs from
implementations.py.
"""

from __future__ import annotations

import itertools
import zlib

import numpy as np

import refspec
from refspec.comparator import compare, spec_case
from refspec.spec.dtypes import round_to

import implementations as impl
from implementations import attrs_of

DTYPES = ("float16", "bfloat16", "float32")
LAYOUT_PATTERNS = {          # logical cos shape over (B, N, S, D) -> per layout
    "BNSD": ("11SD", "B1SD", "BNSD"),
    "BSND": ("11SD", "B1SD", "BNSD"),
    "SBND": ("11SD", "B1SD", "BNSD"),
    "TND": ("B1SD", "BNSD"),
}


def _rng(*key):
    return np.random.default_rng(zlib.crc32(repr(key).encode()))


def _logical_cos_shape(pattern, B, N, S, D):
    return tuple(dim if letter in pattern else 1 for letter, dim in zip("BNSD", (B, N, S, D)))


def rope_cases(grad=True, B=2, N=3, S=5, D=8):
    """One MemoryCase per mode x layout x pattern x dtype (x with/without x for the grad)."""
    out = []
    for mode, (layout, patterns), dtype in itertools.product(range(4), LAYOUT_PATTERNS.items(), DTYPES):
        for pattern in patterns:
            for with_x in ((True, False) if grad else (False,)):
                rng = _rng(grad, mode, layout, pattern, dtype, with_x)
                cshape = _logical_cos_shape(pattern, B, N, S, D)
                lay = lambda a: refspec.to_layout(a, layout, batch=B)
                prim = lay(round_to(rng.uniform(-2, 2, (B, N, S, D)), dtype))
                cos = lay(round_to(np.cos(rng.uniform(-3, 3, cshape)), dtype))
                sin = lay(round_to(np.sin(rng.uniform(-3, 3, cshape)), dtype))
                cid = f"{'rope_grad' if grad else 'rope'}/mode={mode}/{layout}/{pattern}/{dtype}/x={int(with_x)}"
                if grad:
                    x = lay(round_to(rng.uniform(-2, 2, (B, N, S, D)), dtype)) if with_x else None
                    c = spec_case("rotary_position_embedding_grad", dy=prim, cos=cos, sin=sin, x=x,
                                  mode=mode, layout=layout, case_id=cid)
                else:
                    c = spec_case("rotary_position_embedding", x=prim, cos=cos, sin=sin, mode=mode,
                                  layout=layout, case_id=cid)
                out.append(c)
    return out


def nrc_inputs(rng, dtype, B, N, Sq, Sk, Seq, Sek, D, Sr, attrs, scale=1.0):
    def r(*shape):
        return round_to(rng.standard_normal(shape) * scale + rng.uniform(-1, 1), dtype)
    q, k, v = r(B, Sq, N, D), r(B, Sk, N, D), r(B, Sk, N, D)
    eq = r(B, Seq, N, D) if Seq else None
    ek = r(B, Sek, N, D) if Sek else None
    ev = r(B, Sek, N, D) if Sek else None
    w = {f"{p}_weight": r(D) for p in ("norm_query", "norm_key", "norm_added_query", "norm_added_key")}
    b = {f"{p}_bias": r(D) for p in ("norm_query", "norm_key", "norm_added_query", "norm_added_key")}
    ang = rng.uniform(-np.pi, np.pi, (Sr, D))
    rc, rs = round_to(np.cos(ang), dtype), round_to(np.sin(ang), dtype)
    fwd = refspec.norm_rope_concat(q, k, v, eq, ek, ev, **w, **b, rope_sin=rs, rope_cos=rc,
                                   is_training=True, **attrs)
    nt, nat = attrs["norm_type"], attrs["norm_added_type"]
    inputs = dict(grad_query_output=r(B, N, Sq + Seq, D), grad_key_output=r(B, N, Sk + Sek, D),
                  grad_value_output=r(B, N, Sk + Sek, D), query=q, key=k, encoder_query=eq,
                  encoder_key=ek, rope_sin=rs if attrs["rope_type"] else None,
                  rope_cos=rc if attrs["rope_type"] else None)
    for prefix, typ in (("norm_query", nt), ("norm_key", nt), ("norm_added_query", nat),
                        ("norm_added_key", nat)):
        inputs[f"{prefix}_weight"] = w[f"{prefix}_weight"] if typ == 2 else None
        inputs[f"{prefix}_mean"] = getattr(fwd, f"{prefix}_mean")
        inputs[f"{prefix}_rstd"] = getattr(fwd, f"{prefix}_rstd")
    fwd_inputs = dict(query=q, key=k, value=v, encoder_query=eq, encoder_key=ek, encoder_value=ev,
                      **{n: (a if (nt if "added" not in n else nat) == 2 else None) for n, a in {**w, **b}.items()},
                      rope_sin=inputs["rope_sin"], rope_cos=inputs["rope_cos"])
    return inputs, fwd_inputs


def nrc_cases(backward=True, dtypes=DTYPES, scale=1.0, every=1):
    """Every attribute combination (54), encoder streams present or absent, Sr full or 1.
    ``scale`` < 1 gives rows of small variance (next to eps); ``every`` keeps every n-th case."""
    out = []
    combos = list(itertools.product(range(3), range(3), range(3), range(2)))
    for i, (nt, nat, rt, order) in enumerate(combos):
        for enc in (True, False):
            dtype = dtypes[(i + enc) % len(dtypes)]
            rng = _rng(backward, nt, nat, rt, order, enc, dtype)
            B, N, Sq, Sk, D = 2, 2, 3, 4, 8
            Seq, Sek = (2, 3) if enc else (0, 0)
            Sr = min(Sq + Seq, Sk + Sek) if (i + enc) % 2 else 1
            attrs = dict(norm_type=nt, norm_added_type=nat, rope_type=rt, concat_order=order)
            if (2 * i + enc) % every:
                continue
            inputs, fwd_inputs = nrc_inputs(rng, dtype, B, N, Sq, Sk, Seq, Sek, D, Sr, attrs, scale)
            cid = (f"nrc{'_grad' if backward else ''}/{nt}{nat}{rt}{order}/enc={int(enc)}/{dtype}/"
                   f"Sr={Sr}/scale={scale:g}")
            if backward:
                out.append(spec_case("norm_rope_concat_backward", case_id=cid, **inputs, **attrs))
            else:
                out.append(spec_case("norm_rope_concat", case_id=cid, **fwd_inputs, **attrs,
                                     is_training=True))
    return out


def device_outputs(case, bug=None):
    return impl.run(case.op, attrs_of(case), case.inputs, bug)


def judge(cases, bug=None, standard="default"):
    actual = {c.case_id: device_outputs(c, bug) for c in cases}
    return compare(cases, actual, standard=standard)
