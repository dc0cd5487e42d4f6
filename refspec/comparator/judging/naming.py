"""Names in reports: element indices by axis letter, the case context, value formatting, and the
one-line message of a failing output (design.md, principle 8):

    dx[b=1,n=3,s=17,d=5] = 0.1234 but should be 0.1241 (3.2 ulp) [rotary_position_embedding_grad mode=half layout=BNSD cos=11SD dtype=bfloat16]
"""

from __future__ import annotations

import math

import numpy as np

from ... import ops

__all__ = ["axis_names", "index_of", "index_text", "context_of", "format_value", "format_ulps",
           "format_ratio", "element_message", "DIGITS"]

#: significant digits that tell neighbouring values of each dtype apart
DIGITS = {"bfloat16": 4, "float16": 5, "float32": 9, "float64": 17}

def axis_names(axes: str, ndim: int) -> tuple[str, ...]:
    """The name of each of an output's ``ndim`` axes: its letter when ``axes`` names every axis
    (``"BNSD"``), else ``i0``, ``i1``, ... Every message, map and finding names axes so."""
    if axes and len(axes) == ndim:
        return tuple(axes)
    return tuple(f"i{k}" for k in range(ndim))


def index_of(flat: int, shape: tuple[int, ...], axes: str) -> dict[str, int]:
    """{axis name (lower case): index} of a flat C-order index (``axis_names``). Axes named '1'
    (size-1 axes such as the last of BSN1) are left out."""
    if not shape:
        return {}
    idx = np.unravel_index(int(flat), shape)
    out = {}
    for letter, i in zip(axis_names(axes, len(shape)), idx):
        if letter == "1":
            continue
        key = letter.lower()
        while key in out:                 # repeated letters stay distinct
            key += "'"
        out[key] = int(i)
    return out


def index_text(index: dict[str, int], sep: str = ",") -> str:
    """``b=1,n=3,s=17,d=5`` (``sep=", "`` for prose)."""
    return sep.join(f"{k}={v}" for k, v in index.items())


def context_of(op: str, params: dict) -> str:
    """``rotary_position_embedding_grad mode=half layout=BNSD cos=11SD dtype=bfloat16``: the
    spec function of the operator (its record id) and the parameters its record names as the
    context of its messages."""
    record = ops.find(op)
    if record is None:
        return " ".join([str(op)] + [f"dtype={params['dtype']}"] * ("dtype" in params))
    parts = [record.function] + [f"{k}={params[k]}" for k in record.comparison.context
                                 if params.get(k) is not None]
    return " ".join(parts)


def format_value(x: float, dtype: str, extra: int = 0) -> str:
    """A value with enough significant digits for its dtype (``extra`` more for exact values)."""
    if x is None:
        return "-"
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return f"{x:.{DIGITS.get(dtype, 9) + extra}g}"


def format_ulps(u: float) -> str:
    if u is None or math.isnan(u):
        return "-"
    if math.isinf(u):
        return "inf"
    if u == 0:
        return "0"
    if u < 0.1:
        return f"{u:.2g}"
    if u < 1000:
        return f"{u:.1f}"
    return f"{u:.3g}"


def format_ratio(x: float) -> str:
    """An error / allowed ratio in 3 significant digits, or as many more as it takes to show
    which side of 1 it is on (a ratio above 1 fails): 0.9999993, never "1", for a value
    just below 1; "1" only for exactly 1."""
    if x is None:
        return "-"
    if math.isnan(x) or math.isinf(x):
        return format_value(x, "float64")
    for digits in range(3, 18):
        text = f"{x:.{digits}g}"
        shown = float(text)
        if (shown > 1) == (x > 1) and (shown < 1) == (x < 1):
            return text
    return text


def element_message(output: str, index: dict[str, int], actual: float, golden: float,
                    ulps: float, dtype: str, context: str, kind: str = "numeric") -> str:
    """``dx[b=1,n=3,s=17,d=5] = 0.1234 but should be 0.1241 (3.2 ulp) [context]``."""
    where = f"{output}[{index_text(index)}]" if index else output
    note = {"nan mismatch": "NaN mismatch", "inf mismatch": "Inf mismatch"}.get(kind)
    how = note if note else f"{format_ulps(ulps)} ulp"
    return (f"{where} = {format_value(actual, dtype)} but should be "
            f"{format_value(golden, dtype, extra=2)} ({how}) [{context}]")
