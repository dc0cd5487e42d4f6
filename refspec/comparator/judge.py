"""Per-output verdicts (docs/compare.md, "Judging"): every element of the actual output
against the exact float64 golden, in blocks.

For each block: special values are matched by position (NaN matches NaN whatever its sign or
payload, +Inf only +Inf; with ``saturation`` a max-finite value is accepted where the golden is
an infinity of the same sign, both sides clipped to the finite range); every other element gets
a *badness* = |a - g| divided by what the rule allows (> 1 fails), from the checks of its
``refspec.compare.standards.Rule``. ``refspec.compare.metrics.Accumulator`` keeps
the metrics. The verdict follows the rule's aggregation (every element, or 99% and a cap, or the
dual-benchmark ratios).
"""

from __future__ import annotations

import math
from collections import deque
from concurrent.futures import wait
from dataclasses import dataclass, replace
from math import prod

import numpy as np

from ..spec.dtypes import dtype_name, resolve_dtype, round_to
from ..spec.errors import one_line
from .actuals import Problem
from .streaming import COMPUTE_ELEMENTS, READ_ELEMENTS, BlockReader, plan_blocks
from .floatinfo import U_ACC, bits_of, float_info, ulp_at
from .fused import FLAGS, INTS, KIND, PARAMS, fused_block
from .metrics import Accumulator, FusedBlock, Metrics
from .report import OutputResult
from .standards import (C_REDUCTION, ELEMENT_ROUNDINGS, RATIO_LEVELS, RATIO_SMALL_COUNT,
                        ROUNDING_SLACK_U32, SMALL_VALUES, TERM_ROUNDINGS, UNDERFLOW, Rule)

__all__ = ["JudgeOptions", "BlockJudge", "judge_output", "golden_output_info"]

_EMPTY = np.empty(0, np.float64)


@dataclass
class JudgeOptions:
    standard: str = "default"
    rtol: float | None = None
    atol: float | None = None
    saturation: bool = False
    top: int = 10
    ratio_level: str | None = None
    heatmap_axes: str | None = None      # two axis letters, e.g. "SD"; None: the last two
    heatmaps: bool = False               # keep a 2-D max-badness map (for the HTML report)
    read_elements: int = READ_ELEMENTS
    fast: bool = True                    # the fused pass (False: the reference step)
    pool: object = None                  # an Executor: blocks of one output side by side
    diagnose: bool = True                # failing outputs get a diagnosis (run._judge_case)


class BlockJudge:
    """Evaluates one output block by block under ``rule`` (None: metrics only, as for the
    benchmark of the ratio standard).

    Two steps give the same verdicts, counts, maxima, elements and histogram: the fused one
    (``refspec.comparator.fused.fused_block``, one compiled pass per block: ``compute`` and
    ``merge``) and
    the reference step (``_step_reference``, plain NumPy over cache-sized steps), which the
    tests hold the fused one to. The float sums of RMSE, cosine and the mean relative error
    agree to a few float64 roundings. ``compute`` touches nothing shared, so blocks may be
    computed in threads; ``merge`` adds a computed block in flat order."""

    def __init__(self, rule: Rule | None, dtype, K: int | None, acc: Accumulator,
                 saturation: bool = False):
        self.rule = rule
        self.info = float_info(dtype)
        self.dtype = np.dtype(dtype)
        self.K = max(int(K or 0), 0)
        self.acc = acc
        self.saturation = saturation
        r = rule
        self.needs_expected = bool(r and (r.bitwise or r.exempt_rounded))
        self.uses_sum_abs = bool(r and (r.data_atol or r.hard_bound or r.eval_bound))
        k = self.K + TERM_ROUNDINGS
        self.gamma = k * U_ACC / (1 - k * U_ACC) if k * U_ACC < 1 else math.inf
        self.underflow = k * UNDERFLOW
        self.gamma_e = ELEMENT_ROUNDINGS * U_ACC / (1 - ELEMENT_ROUNDINGS * U_ACC)
        self.c_sqrt_k = C_REDUCTION * math.sqrt(self.K) * U_ACC
        self._fused_args = None

    def block_reference(self, flat0, a, g, e, S) -> None:
        """One block (flattened, C order from ``flat0``: a in the output dtype, g exact float64,
        e the golden rounded to the output dtype, S sum of |terms|) through the reference step,
        in cache-sized steps."""
        self.acc.count(a.size)
        for lo in range(0, a.size, COMPUTE_ELEMENTS):
            hi = min(lo + COMPUTE_ELEMENTS, a.size)
            self._step_reference(flat0 + lo, a[lo:hi], g[lo:hi], None if e is None else e[lo:hi],
                                 None if S is None else S[lo:hi])

    def _fused_setup(self):
        r, info = self.rule, self.info
        flags = np.zeros(len(FLAGS), np.int64)
        params = np.zeros(len(PARAMS), np.float64)
        on = dict(has_rule=r is not None, top=self.acc.top, heat=self.acc._heat is not None)
        if r is not None:
            on.update(bitwise=r.bitwise, has_rtol=r.rtol is not None, data_atol=r.data_atol,
                      hard_bound=r.hard_bound, rounding_gate=r.rounding_gate,
                      eval_bound=r.eval_bound, exempt_rounded=r.exempt_rounded)
            params[PARAMS.index("rtol")] = r.rtol or 0.0
            params[PARAMS.index("atol")] = r.atol or 0.0
        for k, v in on.items():
            flags[FLAGS.index(k)] = int(v)
        for k, v in (("c_sqrt_k", self.c_sqrt_k), ("gamma", self.gamma),
                     ("underflow", self.underflow), ("gate_slack", ROUNDING_SLACK_U32 * U_ACC),
                     ("gamma_e", self.gamma_e), ("eval_underflow", ELEMENT_ROUNDINGS * UNDERFLOW),
                     ("overflow", info.overflow), ("sv", self.acc.sv),
                     ("e_small", self.acc.e_small), ("mant", info.mant),
                     ("lowest", info.emin + 1023)):
            params[PARAMS.index(k)] = v
        heat = self.acc._heat if self.acc._heat is not None else np.zeros((1, 1))
        geom = np.ones(4, np.int64)
        if self.acc._heat is not None:
            shape = self.acc._heat_shape
            strides = [prod(shape[i + 1:]) for i in range(len(shape))]
            if self.acc._hj is not None:
                geom[:2] = strides[self.acc._hi], shape[self.acc._hi]
                geom[2:] = strides[self.acc._hj], shape[self.acc._hj]
            else:
                geom[2:] = strides[self.acc._hi], shape[self.acc._hi]
        self._fused_args = (KIND[info.name], flags, params, heat, geom)
        return self._fused_args

    def compute(self, flat0: int, a: np.ndarray, g: np.ndarray, e: np.ndarray | None,
                S: np.ndarray | None) -> "FusedBlock":
        """The fused pass over one block (no shared state is changed but the 2-D map, so
        blocks may be computed side by side when there is none)."""
        kind, flags, params, heat, geom = self._fused_args or self._fused_setup()
        bits = bits_of(a)
        e_bits = bits_of(e) if e is not None and self.needs_expected else bits[:0]
        S = _EMPTY if S is None or not self.uses_sum_abs else np.ascontiguousarray(S, np.float64)
        g = np.ascontiguousarray(g, np.float64)
        out = FusedBlock(flat0, a.size, max(self.acc.top, 0))
        fused_block(bits, e_bits, g, S, kind, flags, params, flat0, heat, geom,
                    out.ints, out.floats, out.hist, out.top, out.elems, out.special)
        n_spec = int(out.ints[INTS.index("n_special")])
        if n_spec > out.special.size:            # many special values: the reference step
            out.arrays = (a.copy(), g.copy(), None if e is None else e.copy(),
                          None if S.size == 0 else S.copy())
        elif n_spec:
            where = out.special[:n_spec]
            out.special_values = (where.copy(), a[where].astype(np.float64), g[where].copy())
        return out

    def merge(self, out: "FusedBlock") -> None:
        """Add a computed block to the metrics (blocks in flat order)."""
        if out.arrays is not None:
            self.block_reference(out.flat0, *out.arrays)
            return
        self.acc.count(out.n)
        if out.special_values is not None:
            self._special(out.flat0, *out.special_values)
        self.acc.add_fused(out)

    def _step_reference(self, flat0, a, g, e, S):
        info = self.info
        a64 = a.astype(np.float64)
        ag = np.abs(g)
        numeric = np.isfinite(a64)
        numeric &= ag < info.overflow
        if numeric.all():
            where = None
        else:
            where = np.flatnonzero(numeric)
            special = np.flatnonzero(~numeric)
            self._special(flat0, special, a64[special], g[special])
            a64, g, ag = a64[where], g[where], ag[where]
            a = a[where]
            e = None if e is None else e[where]
            S = None if S is None else S[where]
        ad = np.abs(a64 - g)
        ulp = ulp_at(ag, info)
        ulps = ad / ulp
        bad = self._badness(a, e, ad, ag, ulp, ulps, S)
        self.acc.add_numeric(flat0, where, a64, g, ad, ag, ulps, bad)

    def _badness(self, a, e, ad, ag, ulp, ulps, S) -> np.ndarray:
        r = self.rule
        if r is None:
            return np.zeros_like(ad)
        if r.bitwise:
            differ = bits_of(a) != bits_of(e)
            bad = np.zeros_like(ad)
            if differ.any():
                bad[differ] = 1.0 + ulps[differ] + 2.0 ** -10
            return bad
        bad = None
        with np.errstate(divide="ignore", invalid="ignore"):
            if r.rtol is not None:
                atol = r.atol or 0.0
                if r.data_atol and S is not None:
                    atol = np.maximum(atol, self.c_sqrt_k * S)
                tol = ag * r.rtol
                tol += atol
                bad = _ratio(ad, tol)
            if r.hard_bound and S is not None:
                hb = S * self.gamma
                hb += 0.5 * ulp
                hb += self.underflow
                bad = _ratio(ad, hb) if bad is None else np.maximum(bad, _ratio(ad, hb))
            if r.rounding_gate:
                lim = ag * (ROUNDING_SLACK_U32 * U_ACC)
                lim += 0.5 * ulp
                rg = _ratio(ad, lim)
                bad = rg if bad is None else np.maximum(bad, rg)
            if r.eval_bound and S is not None and bad is not None:
                eb = S * self.gamma_e
                eb += 0.5 * ulp
                eb += ELEMENT_ROUNDINGS * UNDERFLOW
                bad = np.minimum(bad, _ratio(ad, eb))
        if bad is None:
            return np.zeros_like(ad)
        if r.exempt_rounded:
            bad[bits_of(a) == bits_of(e)] = 0.0
        return bad

    def _special(self, flat0, where, a, gs):
        """Non-numeric elements at positions ``where`` of a block: a and g their values."""
        info = self.info
        gs = gs.copy()
        big = np.abs(gs) >= info.overflow
        gs[big] = np.copysign(np.inf, gs[big])           # the golden as the dtype stores it
        a_nan, g_nan = np.isnan(a), np.isnan(gs)
        matched = (a_nan & g_nan) | (a == gs)
        if self.saturation:
            e = round_to(gs, self.dtype).astype(np.float64)
            ac = np.clip(a, -info.max, info.max)
            ec = np.clip(e, -info.max, info.max)
            matched |= (ac == ec) & (np.abs(ac) == info.max)
        self.acc.add_special(flat0, where, a, gs, matched, a_nan ^ g_nan)


def _ratio(ad, tol):
    out = ad / tol
    out[(ad == 0)] = 0.0
    return out


def golden_output_info(case, name: str) -> dict:
    """dtype (np.dtype and name), shape, class, K, axes of one golden output, and its exact
    values (``exact``: the array or LazyArray the judge reads, opened once)."""
    meta = case.output_meta(name)
    exact = case.exact[name]
    if meta.get("dtype"):
        dt = np.dtype(resolve_dtype(meta["dtype"]))
    else:                                # files that do not name the dtype
        dt = np.dtype(case.expected[name].dtype)
    return {"dtype": dt, "dtype_name": meta.get("dtype") or dtype_name(dt),
            "shape": tuple(exact.shape), "cls": meta.get("comparison_class"),
            "K": meta.get("reduced_terms"), "axes": meta.get("axes") or "", "exact": exact}


def _heat_axes(shape, axes: str, wanted: str | None):
    """Indices of the two axes of the error map (letters ``wanted``, else the last two axes of
    size > 1); (i, None) for one axis; None for scalars."""
    if not shape:
        return None
    letters = axes if axes and len(axes) == len(shape) else ""
    if wanted and letters:
        idx = [letters.upper().find(ch) for ch in wanted.upper()]
        if all(i >= 0 for i in idx) and len(set(idx)) == len(idx) and len(idx) in (1, 2):
            return (idx[0], idx[1] if len(idx) == 2 else None)
    big = [i for i, s in enumerate(shape) if s > 1] or [len(shape) - 1]
    if len(big) == 1:
        return (big[0], None)
    return (big[-2], big[-1])


def judge_output(case, name: str, actual, rule: Rule, opts: JudgeOptions, context: str,
                 benchmark: np.ndarray | None = None, sum_abs=None,
                 info: dict | None = None, heat_now: bool = False) -> OutputResult:
    """The verdict of one output of one golden case against ``actual`` (an ActualArray or a
    Problem). ``benchmark`` is the ratio standard's same-precision result (in memory);
    ``info``: ``golden_output_info`` when the caller has it. With ``opts.heatmaps`` an
    output that does not pass is judged a second time for its 2-D error map (``heat_now``:
    this pass keeps the map), so passing outputs cost nothing more."""
    info = info or golden_output_info(case, name)
    res = OutputResult(case_id=case.case_id, op=case.op, output=name, context=context,
                       regenerate=getattr(case, "regenerate", "") or "",
                       comparison_class=info["cls"], dtype=info["dtype_name"],
                       shape=info["shape"], axes=info["axes"], reduced_terms=info["K"],
                       rule=rule.describe())
    if isinstance(actual, Problem):
        res.source = actual.source
        return res.problem(actual.status, actual.detail)
    res.source = actual.source
    if actual.dtype != info["dtype"]:
        return res.problem("dtype_mismatch", f"{actual.source}: dtype {dtype_name(actual.dtype)} "
                                             f"but the golden output is {info['dtype_name']}")
    if tuple(actual.shape) != info["shape"]:
        return res.problem("shape_mismatch", f"{actual.source}: shape {tuple(actual.shape)} but "
                                             f"the golden output has shape {info['shape']}")

    dt = info["dtype"]
    small = SMALL_VALUES.get(info["dtype_name"], SMALL_VALUES["float32"])
    heat = None
    if heat_now:
        ax = _heat_axes(info["shape"], info["axes"], opts.heatmap_axes)
        if ax is not None:
            heat = (info["shape"], ax[0], ax[1])
            letters = info["axes"] if len(info["axes"]) == len(info["shape"]) else ""
            def _n(i):
                return letters[i] if letters else f"axis {i}"
            res.heat_axes = (_n(ax[0]), _n(ax[1])) if ax[1] is not None else ("", _n(ax[0]))
    acc = Accumulator(small, opts.top, heat)
    judge = BlockJudge(None if rule.ratio_level else rule, dt, info["K"], acc, opts.saturation)
    bench_judge = None
    if rule.ratio_level:
        bench_acc = Accumulator(small, 0)
        bench_judge = BlockJudge(None, dt, info["K"], bench_acc, opts.saturation)
    exact = info["exact"]
    expected = case.expected[name] if judge.needs_expected else None
    if not judge.uses_sum_abs:
        sum_abs = None
    elif name in case.sum_abs:
        sum_abs = case.sum_abs[name]
    readers = [BlockReader(exact, np.float64)]
    readers.append(None if expected is None else BlockReader(expected))
    readers.append(None if sum_abs is None else BlockReader(sum_abs, np.float64))
    rd_g, rd_e, rd_S = readers

    def load(key, flat0, count):
        g = rd_g.read(key, flat0, count)
        try:
            a = actual.read(key, flat0, count).reshape(-1)
        except Exception as exc:  # a file that changed or broke while being read
            raise _ActualUnreadable(one_line(exc)) from None
        e = None if rd_e is None else rd_e.read(key, flat0, count)
        S = None if rd_S is None else rd_S.read(key, flat0, count)
        b = None if bench_judge is None else np.asarray(benchmark[key]).reshape(-1)
        return flat0, a, g, e, S, b

    def work(key, flat0, count):
        flat0, a, g, e, S, b = load(key, flat0, count)
        return (judge.compute(flat0, a, g, e, S),
                None if b is None else bench_judge.compute(flat0, b, g, None, None))

    plan = list(plan_blocks(info["shape"], opts.read_elements, getattr(exact, "chunks", None)))
    try:
        if opts.fast:
            pool = opts.pool if heat is None and len(plan) > 1 else None
            for out, bout in in_order(pool, work, plan):
                judge.merge(out)
                if bout is not None:
                    bench_judge.merge(bout)
        else:
            for key, flat0, count in plan:
                flat0, a, g, e, S, b = load(key, flat0, count)
                judge.block_reference(flat0, a, g, e, S)
                if b is not None:
                    bench_judge.block_reference(flat0, b, g, None, None)
    except _ActualUnreadable as exc:
        return res.problem("unreadable", f"{actual.source}: {exc}")
    except Exception as exc:
        return res.problem("error", f"reading the golden failed: {one_line(exc)}")
    finally:
        for rd in readers:
            if rd is not None:
                rd.close()
    m = acc.finish()
    res.metrics = m
    if rule.ratio_level:
        _verdict_ratio(res, m, bench_acc.finish(), rule)
        if opts.heatmaps and not heat_now and res.status != "pass":
            _add_heatmap(res, case, name, actual, rule, opts, context, benchmark, sum_abs, info)
        return res
    _verdict(res, m, rule)
    if heat_now:
        return res
    if res.status == "fail" and not rule.exempt_rounded and not admits_rounding(rule, dt):
        _check_attainable(res, case, name, actual, rule, opts, context, sum_abs, info)
    if res.status == "fail":
        res.hint = _dtype_hint(actual, info, exact, plan)
    if opts.heatmaps and res.status != "pass":
        _add_heatmap(res, case, name, actual, rule, opts, context, benchmark, sum_abs, info)
    return res


def _add_heatmap(res, case, name, actual, rule, opts, context, benchmark, sum_abs, info):
    """The 2-D error map of an output that did not pass (a second pass that keeps it)."""
    again = judge_output(case, name, actual, rule, replace(opts, top=0, heatmaps=False),
                         context, benchmark, sum_abs, info, heat_now=True)
    if again.metrics is not None and res.metrics is not None:
        res.metrics.heatmap = again.metrics.heatmap
        res.heat_axes = again.heat_axes
    return res


class _ActualUnreadable(Exception):
    """Reading the actual failed (the output is "unreadable", not a golden error)."""


def in_order(pool, fn, items, ahead: int = 4):
    """``fn(*item)`` for each item, results in order; with ``pool`` (an Executor) computed
    side by side, at most ``ahead`` items in flight so memory stays bounded."""
    if pool is None:
        for item in items:
            yield fn(*item)
        return
    pending = deque()
    try:
        for item in items:
            pending.append(pool.submit(fn, *item))
            if len(pending) >= ahead:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()
    finally:
        for f in pending:
            f.cancel()
        wait(pending)


def admits_rounding(rule: Rule, dtype) -> bool:
    """True when the rule accepts every correctly rounded value by construction, so it cannot
    be stricter than the dtype (no second pass needed): bit-identity with the rounded golden,
    a limit that includes half an ulp (rounding gate, hard bound), or rtol >= 2^-(m+1) (half an
    ulp relative to |g| in any binade) with atol >= half the subnormal spacing, on every
    element and without a cap."""
    if rule.bitwise or rule.rounding_gate or rule.hard_bound:
        return True
    if rule.rtol is None or rule.pass_fraction < 1 or rule.max_abs_cap is not None:
        return False
    info = float_info(dtype)
    return rule.rtol >= 2.0 ** -(info.mant + 1) and (rule.atol or 0.0) >= info.tiny_ulp / 2


def _check_attainable(res, case, name, actual, rule, opts, context, sum_abs, info) -> None:
    """A failing output judged again with the elements that equal the golden rounded to the
    output dtype exempt (``Rule.exempt_rounded``): when that passes, every failing element
    is the correctly rounded value, so the standard asks for more than the dtype can hold and
    the status is ``too_strict`` (docs/compare.md, "Too strict")."""
    quiet = replace(opts, top=0, heatmaps=False)
    again = judge_output(case, name, actual, replace(rule, exempt_rounded=True, max_abs_cap=None),
                         quiet, context, None, sum_abs, info)
    if again.metrics is None:
        return
    m = res.metrics
    rounded = m.failures - again.metrics.failures
    ok = again.status == "pass"
    cap = rule.max_abs_cap
    if ok and cap is not None and m.max_abs is not None and m.max_abs.abs_err > cap:
        # the cap on the max abs error, as an element check on the elements not exempt
        capped = Rule(rule.standard, rtol=0.0, atol=cap, exempt_rounded=True)
        ok = judge_output(case, name, actual, capped, quiet, context, None, None,
                          info).status == "pass"
        rounded = max(rounded, 1)
    res.golden_failures = rounded
    if ok:
        res.status = "too_strict"
        res.reason = (f"{res.reason}; every element over the standard equals the golden "
                      f"rounded to {res.dtype}: the standard is stricter than {res.dtype} can "
                      "represent there (not a kernel failure)")
        res.message = f"{res.message} [standard stricter than {res.dtype}]"
    elif rounded:
        res.reason += (f" ({rounded} of them equal the golden rounded to {res.dtype}: the "
                       "standard is stricter than the dtype there)")


#: the two 16-bit dtypes a kernel may confuse: the bits of one read as the other
_TWINS = {"float16": "bfloat16", "bfloat16": "float16"}
_HINT_SAMPLE = 1 << 16


def _dtype_hint(actual, info, exact, plan) -> str:
    """When a failing float16 output is much closer to the golden with its bits read as
    bfloat16 (or the reverse), say so: both are 2 bytes, so a raw file cannot tell them apart.
    Judged on the first elements (at most 2^16), within the twin dtype's Ascend numbers."""
    twin = _TWINS.get(info["dtype_name"])
    if twin is None or not plan:
        return ""
    key, flat0, count = plan[0]
    try:
        a = np.ascontiguousarray(actual.read(key, flat0, count)).reshape(-1)[:_HINT_SAMPLE]
        g = np.asarray(exact[key], dtype=np.float64).reshape(-1)[:a.size]
    except Exception:
        return ""

    def close(values, dtype_name):
        tol = 2.0 ** -7 if dtype_name == "bfloat16" else 2.0 ** -10
        with np.errstate(all="ignore"):
            ok = np.abs(values - g) <= tol + tol * np.abs(g)
        return float(np.mean(ok | (np.isnan(values) & np.isnan(g))))

    as_is = close(a.astype(np.float64), info["dtype_name"])
    other = a.view(np.uint16).view(resolve_dtype(twin)).astype(np.float64)
    as_twin = close(other, twin)
    if as_twin >= 0.99 and as_twin > as_is + 0.5:
        return (f"read as {twin}, {as_twin:.0%} of the first {a.size} elements are within "
                f"{twin}'s tolerance (as {info['dtype_name']}: {as_is:.0%}): was {twin} written "
                f"where {info['dtype_name']} is expected?")
    return ""



def _worst_line(res: OutputResult, m: Metrics) -> str:
    if m.worst:
        return res.element_line(m.worst[0])
    return f"{res.output} [{res.context}]"


def _verdict(res: OutputResult, m: Metrics, rule: Rule) -> None:
    n = m.n
    special = m.nan_mismatches + m.inf_mismatches
    if rule.pass_fraction >= 1:
        ok = m.failures == 0
    else:
        allowed = math.floor((1 - rule.pass_fraction) * n + 1e-9)
        ok = m.failures <= allowed and special == 0
    cap_hit = (rule.max_abs_cap is not None and m.max_abs is not None
               and m.max_abs.abs_err > rule.max_abs_cap)
    ok = ok and not cap_hit
    res.status = "pass" if ok else "fail"
    what = "bit-identical" if rule.bitwise else "within tolerance"
    if ok:
        if m.failures:
            res.reason = (f"{n - m.failures} of {n} elements {what} "
                          f"({1 - m.mismatch_fraction:.2%} >= {rule.pass_fraction:.0%})")
        else:
            res.reason = f"all {n} elements {what}" + (
                f" ({m.n_special_matched} NaN/Inf matched)" if m.n_special_matched else "")
        res.message = ""
        return
    parts = []
    if m.failures:
        parts.append(f"{m.failures} of {n} elements ({m.mismatch_fraction:.3%}) not {what}")
    if special:
        parts.append(f"{m.nan_mismatches} NaN and {m.inf_mismatches} Inf mismatches")
    if cap_hit:
        parts.append(f"max abs error {m.max_abs.abs_err:.3g} > cap {rule.max_abs_cap:g}")
    res.reason = "; ".join(parts)
    res.message = _worst_line(res, m)


def _verdict_ratio(res: OutputResult, m: Metrics, b: Metrics, rule: Rule) -> None:
    t_max, t_mean, t_rmse = RATIO_LEVELS[rule.ratio_level]

    def ratio(dev, bench):
        dev = dev or 0.0
        bench = bench or 0.0
        if bench > 0:
            return dev / bench
        return 0.0 if dev == 0 else math.inf

    r = {"level": rule.ratio_level,
         "max_rel": ratio(m.max_rel, b.max_rel), "mean_rel": ratio(m.mean_rel, b.mean_rel),
         "rmse": ratio(m.rmse, b.rmse),
         "small_errors": ratio(m.small_errors, b.small_errors),
         "device": {"max_rel": m.max_rel, "mean_rel": m.mean_rel, "rmse": m.rmse,
                    "small_errors": m.small_errors},
         "benchmark": {"max_rel": b.max_rel, "mean_rel": b.mean_rel, "rmse": b.rmse,
                       "small_errors": b.small_errors},
         "thresholds": {"max_rel": t_max, "mean_rel": t_mean, "rmse": t_rmse,
                        "small_errors": RATIO_SMALL_COUNT}}
    res.ratio = {k: (v if not isinstance(v, float) or math.isfinite(v) else str(v))
                 for k, v in r.items()}
    over = [f"{k} ratio {r[k]:.3g} > {r['thresholds'][k]:g}"
            for k in ("max_rel", "mean_rel", "rmse", "small_errors") if r[k] > r["thresholds"][k]]
    special = m.nan_mismatches + m.inf_mismatches
    if special:
        over.append(f"{m.nan_mismatches} NaN and {m.inf_mismatches} Inf mismatches")
    if not over:
        res.status = "pass"
        res.reason = (f"device/benchmark ratios within {rule.ratio_level}: max-rel "
                      f"{r['max_rel']:.3g}, mean-rel {r['mean_rel']:.3g}, RMSE {r['rmse']:.3g}")
        return
    res.status = "fail"
    res.reason = f"{rule.ratio_level}: " + "; ".join(over)
    res.message = f"{_worst_line(res, m)}; {res.reason}"
