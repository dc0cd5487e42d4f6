"""The named accuracy standards, as data with the source of every number (docs/compare.md, "Standards").

A standard turns (output dtype, comparison class, K) into a ``Rule``: which per-element
checks apply, with which numbers, and how the element verdicts are aggregated. The judge
(``refspec.comparator.judging``) interprets rules; nothing here computes on arrays.

Standards: ``default`` (the project policy), ``ascend-mixed``, ``torch``, ``vendor-threshold``
and ``ratio`` (dual benchmark). ``--rtol/--atol`` replace the mixed-tolerance numbers of a
standard for one run (``resolve_rule``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from ... import ops
from ...spec.terms import COPY, ELEMENTWISE, QUANTISED, REDUCTION, ROW_REDUCTION

__all__ = ["Standard", "Rule", "STANDARDS", "STANDARD_NAMES", "ASCEND_MIXED", "TORCH_DEFAULTS",
           "VENDOR_THRESHOLDS", "SMALL_VALUES", "RATIO_LEVELS", "C_REDUCTION",
           "TERM_ROUNDINGS", "ROUNDING_SLACK_U32", "ELEMENT_ROUNDINGS", "UNDERFLOW", "QUANT_ROUNDINGS",
           "CODES_RULE", "resolve_rule",
           "element_rule", "standard_table"]

SOURCE = "docs/compare.md, Standards"

#: Ascend "mixed tolerance": (rtol, atol, cap on the max abs error). float64 has no published
#: number: 2^-42 (1024 float64 ulps at 1) is this project's choice for math-only goldens.
ASCEND_MIXED = {
    "float32": (2.0 ** -13, 2.0 ** -13, 1e-2),
    "float16": (2.0 ** -10, 2.0 ** -10, 1e-1),
    "bfloat16": (2.0 ** -7, 2.0 ** -7, 1e-1),
    "float64": (2.0 ** -42, 2.0 ** -42, 1e-9),
}
ASCEND_MIXED_SOURCE = (f"{SOURCE}: Ascend mixed tolerance, rtol = atol = 2^-13 / 2^-10 / 2^-7 "
                       "(float32 / float16 / bfloat16), 99% of elements, max abs error capped "
                       "at 1e-2 / 1e-1 / 1e-1; reductions may be relaxed to 2 ulp")
ASCEND_PASS_FRACTION = 0.99

#: torch.testing.assert_close defaults: (rtol, atol)
TORCH_DEFAULTS = {
    "float32": (1.3e-6, 1e-5),
    "float16": (1e-3, 1e-5),
    "bfloat16": (1.6e-2, 1e-5),
    "float64": (1e-7, 1e-7),
}
TORCH_SOURCE = f"{SOURCE}: torch.testing.assert_close defaults per dtype"

#: vendor NormRopeConcatGrad test script: absolute threshold by reduction count K,
#: as (upper bound of K (exclusive), threshold) pairs. The script gives two numbers for the
#: 16-bit dtypes; they are read as K < 2048 and K >= 2048, like float32's first step.
VENDOR_THRESHOLDS = {
    "float32": ((2048, 2.0 ** -11), (16384, 2.0 ** -10), (math.inf, 2.0 ** -9)),
    "float16": ((2048, 2.0 ** -8), (math.inf, 2.0 ** -7)),
    "bfloat16": ((2048, 2.0 ** -7), (math.inf, 2.0 ** -6)),
    "float64": ((math.inf, 2.0 ** -40),),
}
VENDOR_SOURCE = (f"{SOURCE}: vendor NormRopeConcatGrad test script, absolute threshold by "
                 "reduction count (<2048, <16384, more)")

#: small values (dual-benchmark table): |g| < SV is a small value; it counts as an error when
#: |a - g| > E. Relative errors are measured on the other elements only.
SMALL_VALUES = {
    "float32": (2.0 ** -14, 2.0 ** -30),
    "float16": (2.0 ** -11, 2.0 ** -16),
    "bfloat16": (2.0 ** -8, 2.0 ** -16),
    "float64": (2.0 ** -40, 2.0 ** -60),
}
SMALL_SOURCE = f"{SOURCE}: Ascend dual-benchmark small values (SV, E)"

#: dual-benchmark ratio thresholds: (max-rel, mean-rel, RMSE) device/benchmark; small-value
#: error count ratio <= 2
RATIO_LEVELS = {"L0": (10.0, 2.0, 2.0), "L1": (5.0, 1.5, 1.5), "L2": (2.0, 1.2, 1.2)}
RATIO_SMALL_COUNT = 2.0
RATIO_SOURCE = f"{SOURCE}: Ascend commercial dual-benchmark; msprobe level assignment"
#: msprobe level assignment (npu_rotary_mul is L0; layer_norm/rms_norm backward are L2) is
#: each operator record's ``comparison.ratio_level``

#: reduction class: atol_i = max(atol_dtype, C * sqrt(K) * u_acc * S_i)
C_REDUCTION = 8.0
#: roundings a term may carry before it is summed (product, centring x - mean, RoPE step): the
#: hard bound of a reduction is gamma(K + TERM_ROUNDINGS) * S_i + half an ulp of the output
TERM_ROUNDINGS = 3
#: rounding gate slack: a float32 kernel's value before its one rounding to a 16-bit dtype is
#: within ROUNDING_SLACK_U32 * u_acc * |g| of g (two exact products of 16-bit inputs and one
#: rounded sum, with margin), so it rounds to a neighbour of g, the far one only near a tie
ROUNDING_SLACK_U32 = 4.0
#: roundings of a float32 elementwise RoPE value: two products and their sum
ELEMENT_ROUNDINGS = 3
#: absolute error of one float32 operation in the subnormal range (half the spacing 2^-149)
#: is added per rounding to the hard and evaluation bounds
UNDERFLOW = 2.0 ** -149
#: roundings a float32 kernel makes before quantising a value, besides the K terms of a
#: reduction: RMSNorm's division by n, epsilon, square root, division and gamma; the rotation's
#: two products and their sum; the scale and the offset. The value before quantisation is then
#: within gamma(K + QUANT_ROUNDINGS) * S of the exact one (S: its stored sum of |terms|)
QUANT_ROUNDINGS = 10


@dataclass(frozen=True)
class Rule:
    """Per-element checks for one output and how their verdicts add up.

    - ``bitwise``: the bits must equal the golden rounded to the output dtype (expected/).
    - ``rtol``/``atol``: ``|a - g| <= atol_i + rtol*|g|``, with
      ``atol_i = max(atol, c*sqrt(K)*u*S_i)`` when ``data_atol`` and S is stored.
    - ``hard_bound``: ``|a - g| <= gamma(K + TERM_ROUNDINGS)*S_i + ulp/2`` (needs S).
    - ``rounding_gate``: ``|a - g| <= (1/2 + slack)*ulp`` of the output dtype at g: the nearest
      neighbour of g, either one at a tie (errata E12: half-even vs half-away).
    - ``eval_bound``: an element within ``gamma(ELEMENT_ROUNDINGS)*S + ulp/2`` of g passes
      whatever else holds: what float32 evaluation of ``c*d + s*e`` can do when the products
      cancel (needs S).
    - ``pass_fraction`` of the numeric elements must pass, and the max abs error must be at
      most ``max_abs_cap`` (None: no cap). ``ratio``: judged by the dual benchmark instead.
    - ``exempt_rounded``: an element whose bits equal the golden rounded to the output dtype
      passes whatever else holds (how the comparator tells a standard stricter than the dtype
      from a kernel failure, docs/compare.md "Too strict").
    - ``codes``: quantised codes (``refspec.comparator.judging.quantised``): the code of the
      exact value, or the code of a value within ``gamma(K + QUANT_ROUNDINGS)*S`` of it (the
      neighbouring code where the exact value lies that close to a rounding boundary).
    """

    standard: str
    bitwise: bool = False
    rtol: float | None = None
    atol: float | None = None
    data_atol: bool = False
    hard_bound: bool = False
    rounding_gate: bool = False
    eval_bound: bool = False
    pass_fraction: float = 1.0
    max_abs_cap: float | None = None
    ratio_level: str | None = None
    exempt_rounded: bool = False
    codes: bool = False
    notes: tuple[str, ...] = field(default_factory=tuple)

    def describe(self) -> str:
        """One line: what an element must satisfy."""
        if self.ratio_level:
            t = RATIO_LEVELS[self.ratio_level]
            return (f"ratio {self.ratio_level}: device/benchmark max-rel <= {t[0]:g}, mean-rel <= "
                    f"{t[1]:g}, RMSE <= {t[2]:g}, small-value errors <= {RATIO_SMALL_COUNT:g}x")
        if self.bitwise:
            return "bit-identical to the golden rounded to the output dtype"
        if self.codes:
            return (f"codes equal; the neighbouring code where the exact value is within "
                    f"gamma(K+{QUANT_ROUNDINGS})*S of a rounding boundary; saturation exact")
        parts = []
        if self.rtol is not None:
            atol = f"max({_num(self.atol)}, {C_REDUCTION:g}*sqrt(K)*2^-24*S)" if self.data_atol \
                else _num(self.atol)
            parts.append(f"|a-g| <= {atol} + {_num(self.rtol)}*|g|")
        if self.hard_bound:
            parts.append(f"|a-g| <= gamma(K+{TERM_ROUNDINGS})*S + ulp/2")
        if self.rounding_gate:
            parts.append("|a-g| <= ulp/2 (+float32 slack): nearest value, either at a tie")
        text = " and ".join(parts) or "no check"
        if self.eval_bound:
            text += f"; or |a-g| <= gamma({ELEMENT_ROUNDINGS})*S + ulp/2 (products that cancel)"
        if self.pass_fraction < 1:
            text += f", {self.pass_fraction:.0%} of elements"
        if self.max_abs_cap is not None:
            text += f", max abs error <= {self.max_abs_cap:g}"
        return text


def _num(x) -> str:
    if x is None:
        return "0"
    if x > 0:
        e = math.log2(x)
        if e == int(e) and abs(e) >= 4:
            return f"2^{int(e)}"
    return f"{x:g}"


@dataclass(frozen=True)
class Standard:
    """A named standard: ``rule(dtype, cls, K)`` gives the Rule for one output."""

    name: str
    summary: str
    sources: tuple[str, ...]

    def rule(self, dtype: str, cls: str, K: int | None) -> Rule:
        return _RULES[self.name](dtype, cls, K)


def _dtype_key(dtype: str) -> str:
    return dtype if dtype in ASCEND_MIXED else "float32"


def _default(dtype, cls, K):
    rtol, atol, _ = ASCEND_MIXED[_dtype_key(dtype)]
    if cls == COPY:
        return Rule("default", bitwise=True, notes=("copy: no arithmetic, so no rounding error",))
    gate = dtype in ("float16", "bfloat16")
    if cls == ELEMENTWISE:
        return Rule("default", rtol=rtol, atol=atol, rounding_gate=gate, eval_bound=True,
                    notes=("elementwise: Ascend mixed numbers on every element",
                           "16-bit outputs: one rounding of a float32 value lands on the nearest "
                           "neighbour of the exact value (either one at a tie, errata E12)"))
    if cls == ROW_REDUCTION:
        return Rule("default", rtol=2 * rtol, atol=atol, data_atol=True,
                    notes=("row reduction: rtol doubled (2 ulp) plus the data-dependent atol",))
    if cls == REDUCTION:
        return Rule("default", rtol=rtol, atol=atol, data_atol=True, hard_bound=True,
                    notes=("reduction: atol_i = max(atol, 8*sqrt(K)*2^-24*S_i) and the hard bound "
                           "of float32 accumulation in any order",))
    raise ValueError(f"unknown comparison class {cls!r}")


def _ascend(dtype, cls, K):
    rtol, atol, cap = ASCEND_MIXED[_dtype_key(dtype)]
    if cls in (ROW_REDUCTION, REDUCTION):
        rtol *= 2
    return Rule("ascend-mixed", rtol=rtol, atol=atol, pass_fraction=ASCEND_PASS_FRACTION,
                max_abs_cap=cap)


def _torch(dtype, cls, K):
    rtol, atol = TORCH_DEFAULTS[_dtype_key(dtype)]
    return Rule("torch", rtol=rtol, atol=atol)


def _vendor(dtype, cls, K):
    k = K if (K is not None and K > 0) else 1
    for upper, thr in VENDOR_THRESHOLDS[_dtype_key(dtype)]:
        if k < upper:
            return Rule("vendor-threshold", rtol=0.0, atol=thr)
    raise AssertionError("unreachable: the last threshold has no upper bound")


def _ratio(dtype, cls, K):
    return Rule("ratio", ratio_level="L0")


_RULES = {"default": _default, "ascend-mixed": _ascend, "torch": _torch,
          "vendor-threshold": _vendor, "ratio": _ratio}

STANDARDS = {
    "default": Standard(
        "default", "project policy: copies bit-identical; elementwise Ascend mixed numbers on "
        "every element plus the nearest-rounding gate for 16-bit outputs; row reductions 2 ulp "
        "plus data-dependent atol; reductions atol from K and sum|terms| plus a hard bound",
        (f"{SOURCE}: Policy", ASCEND_MIXED_SOURCE, "docs/errata.md E12")),
    "ascend-mixed": Standard(
        "ascend-mixed", "Ascend mixed tolerance: 99% of elements within atol + rtol*|g|, max abs "
        "error capped", (ASCEND_MIXED_SOURCE,)),
    "torch": Standard("torch", "torch.testing.assert_close defaults, every element",
                      (TORCH_SOURCE,)),
    "vendor-threshold": Standard(
        "vendor-threshold", "vendor script: absolute threshold by reduction count, every element",
        (VENDOR_SOURCE,)),
    "ratio": Standard(
        "ratio", "dual benchmark: device error / error of a same-precision float32 benchmark "
        "computed by the spec's formula blocks, thresholds by msprobe level",
        (RATIO_SOURCE,)),
}
STANDARD_NAMES = tuple(STANDARDS)


#: quantised codes, under every standard (a code has no tolerance to trade: it is the exact
#: value's, or the neighbour a float32 kernel's own error may reach), overrides not applied
CODES_RULE = Rule("default", codes=True, notes=(
    "quantised codes: equal, or the neighbouring code within a float32 kernel's arithmetic "
    "error of a rounding boundary (counted as boundary); saturation exact",))


def resolve_rule(standard: str, dtype: str, cls: str, K: int | None, *, rtol=None, atol=None,
                 op: str | None = None, ratio_level: str | None = None) -> Rule:
    """The rule for one output, with ``rtol``/``atol`` overrides applied.

    An override makes the element check exactly ``|a - g| <= atol + rtol*|g|`` (the other number
    taken from the standard); copies stay bit-identical under ``default``. Quantised codes are
    judged by ``CODES_RULE`` under every standard.
    """
    if standard not in STANDARDS:
        raise ValueError(f"unknown standard {standard!r}; allowed: {', '.join(STANDARD_NAMES)}")
    if cls == QUANTISED:
        return replace(CODES_RULE, standard=standard)
    rule = STANDARDS[standard].rule(dtype, cls, K)
    if standard == "ratio":
        record = None if op is None else ops.find(op)
        level = ratio_level or (record.comparison.ratio_level if record is not None else "L0")
        if level not in RATIO_LEVELS:
            raise ValueError(f"unknown ratio level {level!r}; allowed: {', '.join(RATIO_LEVELS)}")
        return replace(rule, ratio_level=level)
    if (rtol is not None or atol is not None) and not rule.bitwise:
        rule = replace(rule, rtol=rule.rtol if rtol is None else float(rtol),
                       atol=rule.atol if atol is None else float(atol),
                       data_atol=False, hard_bound=False, rounding_gate=False, eval_bound=False,
                       notes=rule.notes + ("numbers overridden for this run",))
    return rule


def element_rule(rule: Rule, dtype: str, K: int | None) -> Rule:
    """The rule an element is held to: ``rule`` itself, except for the ratio standard, which
    judges whole outputs, not elements: its elements are held to the default standard's checks
    (elementwise without reduced terms, a reduction with them)."""
    if rule.ratio_level:
        return STANDARDS["default"].rule(dtype, REDUCTION if K else ELEMENTWISE, K)
    return rule


def standard_table() -> list[dict]:
    """Every number of every standard with its source (for docs and reports)."""
    rows = []
    for dt, (rtol, atol, cap) in ASCEND_MIXED.items():
        rows.append(dict(standard="ascend-mixed/default", dtype=dt, rtol=rtol, atol=atol, cap=cap,
                         source=ASCEND_MIXED_SOURCE))
    for dt, (rtol, atol) in TORCH_DEFAULTS.items():
        rows.append(dict(standard="torch", dtype=dt, rtol=rtol, atol=atol, source=TORCH_SOURCE))
    for dt, steps in VENDOR_THRESHOLDS.items():
        rows.append(dict(standard="vendor-threshold", dtype=dt,
                         thresholds=[(u if math.isfinite(u) else None, t) for u, t in steps],
                         source=VENDOR_SOURCE))
    for dt, (sv, e) in SMALL_VALUES.items():
        rows.append(dict(standard="small values", dtype=dt, sv=sv, e=e, source=SMALL_SOURCE))
    for lvl, t in RATIO_LEVELS.items():
        rows.append(dict(standard="ratio", level=lvl, max_rel=t[0], mean_rel=t[1], rmse=t[2],
                         source=RATIO_SOURCE))
    return rows
