"""The compiled pass: every per-element quantity of one block in one fused loop (numba).

``fused_block`` computes, element by element, exactly the operations of the NumPy pass
(``refspec.comparator.judging.numpy_pass``, docs/compare.md "Judging"): the actual decoded from
its bits to float64, d = a - g, |d|, the dtype's spacing at |g| (a power of two from the exponent
bits of g), ulps = |d| / spacing, the badness of the rule's checks in the order of operations of
``refspec.comparator.judging.bounds.badness``, and accumulates what
``refspec.comparator.judging.metrics.Accumulator`` keeps: counts, maxima with their elements
(first occurrence), the ulp histogram, the small-value counts, the relative errors, the top-k
worst elements under the report's total order (badness, then |a - g| descending, then flat
index ascending), what the too-strict question needs, and the optional 2-D map. The float sums
behind RMSE, cosine similarity and the mean relative error are added in four lanes per chunk of
``CHUNK`` elements, so they agree with the NumPy pass's per-step sums to a few float64
roundings, not bit for bit. Elements that are not numeric (NaN or an infinity in the actual, a
golden that rounds to an infinity) are only listed: the caller matches them
(``refspec.comparator.judging.special_values``).

Its arguments are named tuples (``Block``, ``Flags``, ``Params``, ``HeatMap``, ``Results``) and
its result arrays are indexed by name (``INTS_AT``, ``FLOATS_AT``, ``ELEMENT_AT``).

The function is compiled on first use and cached on disk (``cache=True``); it releases the GIL,
so blocks are judged in threads side by side.
"""

from __future__ import annotations

import math
from collections import namedtuple

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic

from .metrics import ELEMENT, ELEMENT_AT, FLOATS, FLOATS_AT, INTS, INTS_AT, NBINS

__all__ = ["fused_block", "KIND", "FLAGS", "PARAMS", "INTS", "FLOATS", "ELEMENT", "CHUNK",
           "Flags", "Params", "Block", "Results", "HeatMap"]

#: codes of the output dtypes (how the kernel decodes an actual's bits)
KIND = {"float32": 0, "float16": 1, "bfloat16": 2, "float64": 3}
#: the rule's switches (ints: 0 off), the number of worst elements kept (``top``), and
#: ``counts_rounded``: count what the too-strict question needs (``Metrics.rounded_failures``)
FLAGS = ("has_rule", "bitwise", "has_rtol", "data_atol", "hard_bound", "rounding_gate",
         "eval_bound", "top", "heat", "exempt_rounded", "counts_rounded")
#: the rule's numbers and the dtype's (floats)
PARAMS = ("rtol", "atol", "c_sqrt_k", "gamma", "underflow", "gate_slack", "gamma_e",
          "eval_underflow", "overflow", "sv", "e_small", "mant", "lowest")
Flags = namedtuple("Flags", FLAGS)
Params = namedtuple("Params", PARAMS)
#: one block: ``a`` the actual's bits, ``e`` the rounded golden's bits (or empty), ``g`` the
#: exact golden, ``S`` the sums of |terms| (or empty), all C order from flat index ``flat0``;
#: ``kind`` the output dtype's code (``KIND``)
Block = namedtuple("Block", ("a", "e", "g", "S", "kind", "flat0"))
#: what a block gives: ``ints`` and ``floats`` (``INTS``, ``FLOATS``), the ulp histogram
#: ``hist``, the worst rows ``top`` and the rows ``elems`` of the max |a - g| and the max
#: relative error (``ELEMENT`` columns), ``special`` the positions of non-numeric elements
Results = namedtuple("Results", ("ints", "floats", "hist", "top", "elems", "special"))
#: the 2-D map (max badness per cell) and how a flat index finds its cell
HeatMap = namedtuple("HeatMap", ("cells", "row_stride", "rows", "col_stride", "cols"))
#: one chunk of numeric elements: ``A`` (decoded actual), ``E`` (decoded rounded golden), ``G``
#: (exact golden), ``S`` (sums of |terms|, when ``has_S``), ``m`` of them, at local flat index
#: ``I[k]`` when ``mapped``, else ``c0 + k``; ``BAD`` and ``B`` (badness, histogram bin) scratch
Chunk = namedtuple("Chunk", ("A", "E", "G", "S", "I", "BAD", "B", "m", "c0", "mapped", "has_S",
                             "kind", "flat0"))

_MANT64 = (1 << 52) - 1
_EXP_MASK = 0x7FF
_LO = 1022                 # biased exponent of the histogram's bin (0, 1/2]


def _bitcast(src, dst, llvm_dst):
    """An intrinsic that reinterprets the bits of a ``src`` scalar as a ``dst`` scalar."""
    @intrinsic
    def cast(typingctx, x):
        if x != src:
            return None

        def codegen(context, builder, sig, args):
            return builder.bitcast(args[0], llvm_dst)
        return dst(src), codegen
    return cast


_f64_bits = _bitcast(types.float64, types.int64, ir.IntType(64))
_bits_f64 = _bitcast(types.int64, types.float64, ir.DoubleType())
_bits_f32 = _bitcast(types.uint32, types.float32, ir.FloatType())


@njit(inline="always")
def _decode(b, kind):
    """An actual element's bits (uint16/32/64) to float64, by the dtype code ``kind``."""
    if kind == 0:
        return np.float64(_bits_f32(np.uint32(b)))
    if kind == 2:                                       # bfloat16: the top half of a float32
        return np.float64(_bits_f32(np.uint32(np.uint32(b) << np.uint32(16))))
    if kind == 1:                                       # float16
        u = np.uint32(b)
        e = (u >> np.uint32(10)) & np.uint32(0x1F)
        m = u & np.uint32(0x3FF)
        if e == 0:
            v = np.float64(m) * 5.9604644775390625e-08  # m * 2^-24, subnormals and zero
        elif e == 31:
            v = np.inf if m == 0 else np.nan
        else:
            v = np.float64(_bits_f32(np.uint32(((e + np.uint32(112)) << np.uint32(23))
                                                 | (m << np.uint32(13)))))
        return -v if (u >> np.uint32(15)) else v
    return _bits_f64(np.int64(b))


#: elements per chunk: the chunk's temporaries stay in the first-level cache
CHUNK = 512


@njit(cache=True, nogil=True, error_model="numpy")
def fused_block(block, flags, params, heat, out):
    """One ``Block`` under the rule's ``Flags`` and ``Params``; results into ``out``
    (``Results``: ``ints.n_special`` says how many special positions there are, also beyond
    the size of ``special``) and, when ``flags.heat``, the ``HeatMap``.

    The block goes in chunks of ``CHUNK`` elements. A chunk whose elements are all numeric
    is judged where it lies; otherwise its numeric elements are gathered first and the others
    listed. Each chunk takes a few short loops without branches, which the compiler
    vectorises (decoding; the badness; the histogram bins; the sums, counts and maxima), then
    looks for the positions of new maxima and worst elements only where a chunk holds one."""
    g, S, kind, flat0 = block.g, block.S, block.kind, block.flat0
    n = g.size
    has_S = S.size > 0
    A = np.empty(CHUNK)
    E = np.empty(CHUNK)
    G = np.empty(CHUNK)
    SB = np.empty(CHUNK)
    BAD = np.empty(CHUNK)
    I = np.empty(CHUNK, np.int64)
    B = np.empty(CHUNK, np.int64)
    floats = out.floats
    floats[FLOATS_AT.max_abs] = -1.0
    floats[FLOATS_AT.max_rel] = -1.0
    floats[FLOATS_AT.max_abs_small] = -1.0
    H = np.zeros((8, out.hist.size), np.int64)
    bitwise = flags.has_rule != 0 and (flags.bitwise != 0 or flags.exempt_rounded != 0
                                       or flags.counts_rounded != 0)
    overflow = params.overflow
    for c0 in range(0, n, CHUNK):
        c1 = min(c0 + CHUNK, n)
        m = c1 - c0
        nn = _decode_run(block.a, g, c0, m, kind, A, overflow)
        if bitwise:
            _decode_run(block.e, g, c0, m, kind, E, overflow)
        if nn == 0:
            _chunk(Chunk(A, E, g[c0:c1], S[c0:c1] if has_S else g[c0:c1], I, BAD, B, m, c0,
                         False, has_S, kind, flat0), flags, params, heat, out, H)
            continue
        q = _gather(Chunk(A, E, G, SB, I, BAD, B, m, c0, True, has_S, kind, flat0), block,
                    overflow, out)
        if q:
            _chunk(Chunk(A[:q], E[:q], G[:q], SB[:q], I, BAD, B, q, c0, True, has_S, kind,
                         flat0), flags, params, heat, out, H)
    for r in range(8):
        for b in range(out.hist.size):
            out.hist[b] += H[r, b]


@njit(inline="always")
def _gather(c, block, overflow, out):
    """The numeric elements of the ``c.m`` decoded ones of chunk ``c`` moved to its front
    (``A``, ``E``, ``G``, ``S``, their positions in ``I``); the others' positions listed in
    ``out.special`` (counted beyond its size). Returns how many are numeric."""
    g, S, special, ints = block.g, block.S, out.special, out.ints
    A, E, c0 = c.A, c.E, c.c0
    q = 0
    for k in range(c.m):
        av = A[k]
        gv = g[c0 + k]
        if math.isfinite(av) and abs(gv) < overflow:
            A[q] = av
            E[q] = E[k]
            c.G[q] = gv
            c.S[q] = S[c0 + k] if c.has_S else 0.0
            c.I[q] = c0 + k
            q += 1
        else:
            if ints[INTS_AT.n_special] < special.size:
                special[ints[INTS_AT.n_special]] = c0 + k
            ints[INTS_AT.n_special] += 1
    return q


@njit(inline="always")
def _decode_run(bits, g, c0, m, kind, out, overflow):
    """``out[:m]`` = elements c0 .. c0+m-1 of ``bits`` decoded; returns how many of them are
    not numeric (a NaN or an infinity, or a golden ``g`` that rounds to an infinity). One loop
    per dtype, so each is free of the dtype test and vectorises."""
    nn = 0
    if kind == 0:
        for k in range(m):
            av = _decode(bits[c0 + k], 0)
            out[k] = av
            nn += (not math.isfinite(av)) | (not abs(g[c0 + k]) < overflow)
    elif kind == 1:
        for k in range(m):
            av = _decode(bits[c0 + k], 1)
            out[k] = av
            nn += (not math.isfinite(av)) | (not abs(g[c0 + k]) < overflow)
    elif kind == 2:
        for k in range(m):
            av = _decode(bits[c0 + k], 2)
            out[k] = av
            nn += (not math.isfinite(av)) | (not abs(g[c0 + k]) < overflow)
    else:
        for k in range(m):
            av = _decode(bits[c0 + k], 3)
            out[k] = av
            nn += (not math.isfinite(av)) | (not abs(g[c0 + k]) < overflow)
    return nn


@njit(inline="always")
def _spacing(gv, mant, lowest):
    """The spacing of the dtype at |g| (docs/compare.md, "ulps"): 2^k with k = max(e, emin) -
    mant for |g| in [2^e, 2^(e+1)), built from the exponent bits of g (``lowest`` = emin + 1023;
    below 2^-1022 the power of two is a float64 subnormal). Same value as
    ``refspec.comparator.judging.floatinfo.ulp_at``."""
    b = (_f64_bits(gv) >> 52) & _EXP_MASK
    k = (b if b > lowest else lowest) - 1023 - mant
    return _bits_f64(np.int64(((k + 1023) << 52) if k >= -1022 else (1 << (k + 1074))))


@njit(inline="always")
def _inverse_spacing(gv, mant, lowest):
    """1 / ``_spacing`` for dtypes narrower than float64 (2^-k with k >= -149: a normal
    float64), so ``ulps = |d| * _inverse_spacing`` equals ``|d| / spacing`` exactly."""
    b = (_f64_bits(gv) >> 52) & _EXP_MASK
    k = (b if b > lowest else lowest) - 1023 - mant
    return _bits_f64(np.int64((1023 - k) << 52))


@njit(inline="always")
def _bin(ulps):
    """The ulp histogram bin of a distance: the biased exponent of (bits + mantissa mask) is
    1023 + ceil(log2 ulps); 0 for no distance, the last bin above 2^20."""
    raw = (_f64_bits(ulps) + _MANT64) >> 52
    bx = raw - _LO + 1
    bx = 1 if bx < 1 else bx
    bx = NBINS - 1 if bx > NBINS - 1 else bx
    return 0 if raw == 0 else bx


@njit(nogil=True, error_model="numpy")
def _chunk(c, flags, params, heat, out, hist):
    """The ``c.m`` numeric elements of ``Chunk`` ``c``: their badness and histogram bins,
    then the sums, counts and maxima in ``out.ints``/``out.floats``, the histogram ``hist``
    (eight rows), the extreme elements, the top rows and the map."""
    mant = np.int64(params.mant)
    lowest = np.int64(params.lowest)
    _badness(c, flags, params, mant, lowest)
    if c.kind == 3:
        for k in range(c.m):
            gv = c.G[k]
            c.B[k] = _bin(abs(c.A[k] - gv) / _spacing(gv, mant, lowest))
    else:                               # 1 / spacing is a float64 too: multiply (same value)
        for k in range(c.m):
            gv = c.G[k]
            c.B[k] = _bin(abs(c.A[k] - gv) * _inverse_spacing(gv, mant, lowest))
    cbad = _add_chunk(c, params, out, hist, mant, lowest)
    if flags.counts_rounded != 0:
        _count_rounded(c, out)
    T = flags.top
    if T > 0 and (out.ints[INTS_AT.n_top] < T or cbad >= out.top[T - 1, ELEMENT_AT.badness]):
        _keep_top(c, T, out, mant, lowest)
    if flags.heat:
        _heat_add(c, heat)


@njit(inline="always")
def _count_rounded(c, out):
    """The chunk's elements over the rule whose value is the rounded golden's (same value, same
    sign), and the largest |a - g| of the others (``bounds.rounded_counts``)."""
    A, E, G, BAD = c.A, c.E, c.G, c.BAD
    n = 0
    mu = 0
    for k in range(c.m):
        av = A[k]
        ev = E[k]
        same = (ev == av) & (math.copysign(1.0, ev) == math.copysign(1.0, av))
        n += 1 if same and BAD[k] > 1.0 else 0
        x = 0 if same else _f64_bits(abs(av - G[k]))
        mu = x if x > mu else mu
    out.ints[INTS_AT.rounded_failures] += n
    v = _bits_f64(mu)
    if v > out.floats[FLOATS_AT.max_abs_unrounded]:
        out.floats[FLOATS_AT.max_abs_unrounded] = v


@njit(inline="always")
def _badness(c, flags, params, mant, lowest):
    """``c.BAD``: |a - g| over what the rule allows (> 1 fails), in the reference's order of
    operations (``refspec.comparator.judging.bounds.badness``); 0 without a rule."""
    has_rule = flags.has_rule != 0
    A, E, BAD = c.A, c.E, c.BAD
    if has_rule and flags.bitwise != 0:          # a copy: bit-identical to the rounded golden
        for k in range(c.m):
            av = A[k]
            ev = E[k]
            gv = c.G[k]
            differ = (ev != av) | (math.copysign(1.0, ev) != math.copysign(1.0, av))
            ul = _spacing(gv, mant, lowest)
            ad = abs(av - gv)
            ulps = ad / ul
            BAD[k] = (1.0 + ulps + 0.0009765625) if differ else 0.0
    elif not has_rule:
        for k in range(c.m):
            BAD[k] = 0.0
    else:
        _tolerance_badness(c, flags, params, mant, lowest)
        if flags.exempt_rounded != 0:            # the rounded golden's own value passes
            for k in range(c.m):
                av = A[k]
                ev = E[k]
                same = (ev == av) & (math.copysign(1.0, ev) == math.copysign(1.0, av))
                BAD[k] = 0.0 if same else BAD[k]


@njit(inline="always")
def _tolerance_badness(c, flags, params, mant, lowest):
    """The rule's allowances combined into one: the largest of the ratios ad/t_i is
    ad/min(t_i), then min with ad/eb is ad/max(., eb) (correctly rounded division is
    monotonic in the divisor), so one division gives the reference's value exactly."""
    has_S = c.has_S
    with_rtol = flags.has_rtol != 0
    data = flags.data_atol != 0 and has_S
    hard = flags.hard_bound != 0 and has_S
    gate = flags.rounding_gate != 0
    evalb = flags.eval_bound != 0 and has_S and (with_rtol or hard or gate)
    rtol, atol, c_sqrt_k = params.rtol, params.atol, params.c_sqrt_k
    gamma, underflow, slack = params.gamma, params.underflow, params.gate_slack
    gamma_e, eval_uf = params.gamma_e, params.eval_underflow
    A, G, Sx, BAD = c.A, c.G, c.S, c.BAD
    for k in range(c.m):
        gv = G[k]
        ad = abs(A[k] - gv)
        agv = abs(gv)
        ul = _spacing(gv, mant, lowest)
        sx = Sx[k]
        t = np.inf
        at = max(atol, c_sqrt_k * sx) if data else atol
        tol = agv * rtol
        tol += at
        t = tol if with_rtol else t
        hb = sx * gamma
        hb += 0.5 * ul
        hb += underflow
        t = (hb if hb < t else t) if hard else t
        lim = agv * slack
        lim += 0.5 * ul
        t = (lim if lim < t else t) if gate else t
        eb = sx * gamma_e
        eb += 0.5 * ul
        eb += eval_uf
        t = (eb if eb > t else t) if evalb else t
        BAD[k] = 0.0 if ad == 0.0 else ad / t


@njit(inline="always")
def _add_chunk(c, params, out, hist, mant, lowest):
    """The chunk's sums, counts, histogram bins and maxima added to ``out`` (with the
    elements of a new largest |d| and largest relative error); returns its largest badness."""
    A, G, m = c.A, c.G, c.m
    sv, e_small = params.sv, params.e_small
    s_d2, s_ag, s_a2, s_g2, s_rel, mr = _sums(A, G, m, sv)
    fails, n_small, small_err, mb, ma, ms = _counts(A, G, c.BAD, m, sv, e_small)
    ints, floats = out.ints, out.floats
    floats[FLOATS_AT.sum_d2] += s_d2
    floats[FLOATS_AT.sum_ag] += s_ag
    floats[FLOATS_AT.sum_a2] += s_a2
    floats[FLOATS_AT.sum_g2] += s_g2
    floats[FLOATS_AT.sum_rel] += s_rel
    ints[INTS_AT.n_numeric] += m
    ints[INTS_AT.failures] += fails
    ints[INTS_AT.n_small] += n_small
    ints[INTS_AT.small_errors] += small_err
    ints[INTS_AT.n_rel] += m - n_small
    cbad = _bits_f64(mb)
    cad = _bits_f64(ma)
    crel = _bits_f64(mr) if n_small < m else -1.0
    csmall = _bits_f64(ms) if n_small > 0 else -1.0
    for k in range(m):                  # eight histograms: no wait on the last increment
        hist[k & 7, c.B[k]] += 1
    if cbad > floats[FLOATS_AT.max_badness]:
        floats[FLOATS_AT.max_badness] = cbad
    if csmall > floats[FLOATS_AT.max_abs_small]:
        floats[FLOATS_AT.max_abs_small] = csmall
    if cad > floats[FLOATS_AT.max_abs]:     # the first element with the chunk's largest |d|
        floats[FLOATS_AT.max_abs] = cad
        k = 0
        while abs(A[k] - G[k]) != cad:
            k += 1
        _element(out.elems, 0, k, c, mant, lowest)
    if crel > floats[FLOATS_AT.max_rel]:
        floats[FLOATS_AT.max_rel] = crel
        k = 0
        while abs(G[k]) < sv or abs(A[k] - G[k]) / abs(G[k]) != crel:
            k += 1
        _element(out.elems, 1, k, c, mant, lowest)
    return cbad


@njit(inline="always")
def _keep_top(c, T, out, mant, lowest):
    """The chunk's elements among the ``T`` worst rows of ``out.top`` (best first) under the
    report's total order: badness, then |a - g| descending, then flat index ascending (an
    earlier element stays ahead of an equal later one)."""
    top, ints = out.top, out.ints
    BAD_AT, AD_AT = ELEMENT_AT.badness, ELEMENT_AT.abs_err
    for k in range(c.m):
        bad = c.BAD[k]
        ad = abs(c.A[k] - c.G[k])
        nt = ints[INTS_AT.n_top]
        if nt < T or bad > top[T - 1, BAD_AT] or (bad == top[T - 1, BAD_AT]
                                                   and ad > top[T - 1, AD_AT]):
            j = nt if nt < T else T - 1
            while j > 0 and (bad > top[j - 1, BAD_AT] or (bad == top[j - 1, BAD_AT]
                                                          and ad > top[j - 1, AD_AT])):
                for col in range(top.shape[1]):
                    top[j, col] = top[j - 1, col]
                j -= 1
            _element(top, j, k, c, mant, lowest)
            if nt < T:
                ints[INTS_AT.n_top] = nt + 1


@njit(inline="always")
def _heat_add(c, heat):
    """The chunk's badness into the map: the largest per cell (capped at 1e300). Along a run
    of consecutive elements the cell's row and column are stepped, not divided out again."""
    cells = heat.cells
    if c.mapped:
        for k in range(c.m):
            flat = c.flat0 + c.I[k]
            row = (flat // heat.row_stride) % heat.rows
            col = (flat // heat.col_stride) % heat.cols
            v = min(c.BAD[k], 1e300)
            if v > cells[row, col]:
                cells[row, col] = v
        return
    flat = c.flat0 + c.c0
    rq, rr = flat // heat.row_stride, flat % heat.row_stride
    cq, cr = flat // heat.col_stride, flat % heat.col_stride
    row, col = rq % heat.rows, cq % heat.cols
    for k in range(c.m):
        v = min(c.BAD[k], 1e300)
        if v > cells[row, col]:
            cells[row, col] = v
        rr += 1
        if rr == heat.row_stride:
            rr = 0
            row = row + 1 if row + 1 < heat.rows else 0
        cr += 1
        if cr == heat.col_stride:
            cr = 0
            col = col + 1 if col + 1 < heat.cols else 0


@njit(nogil=True, error_model="numpy", fastmath={"reassoc"})
def _sums(A, G, m, sv):
    """sum d^2, a*g, a^2, g^2 and of the relative errors |d|/|g| of non-small elements (the
    compiler may add them in any order: they agree with other orders to a few roundings), and
    the bit pattern of the largest relative error (exact)."""
    s0 = s1 = s2 = s3 = s4 = 0.0
    mr = 0
    for k in range(m):
        av = A[k]
        gv = G[k]
        d = av - gv
        s0 += d * d
        s1 += av * gv
        s2 += av * av
        s3 += gv * gv
        agv = abs(gv)
        r = 0.0 if agv < sv else abs(d) / agv
        s4 += r
        x = _f64_bits(r)
        mr = x if x > mr else mr
    return s0, s1, s2, s3, s4, mr


@njit(nogil=True, error_model="numpy")
def _counts(A, G, BAD, m, sv, e_small):
    """Failures, small values, small-value errors, and the bit patterns of the largest
    badness, |d| and small-value |d| (non-negative floats order as their
    bits, so the maxima are integer maxima: exact, in any order)."""
    fails = n_small = small_err = 0
    mb = ma = ms = 0
    for k in range(m):
        bad = BAD[k]
        gv = G[k]
        ad = abs(A[k] - gv)
        agv = abs(gv)
        small = agv < sv
        fails += 1 if bad > 1.0 else 0
        n_small += 1 if small else 0
        small_err += 1 if small and ad > e_small else 0
        x = _f64_bits(bad)
        mb = x if x > mb else mb
        x = _f64_bits(ad)
        ma = x if x > ma else ma
        x = _f64_bits(ad) if small else 0
        ms = x if x > ms else ms
    return fails, n_small, small_err, mb, ma, ms


@njit(inline="always")
def _element(rows, r, k, c, mant, lowest):
    """Row ``r`` of ``rows``: element k of chunk ``c`` (``ELEMENT`` columns)."""
    av = c.A[k]
    gv = c.G[k]
    ad = abs(av - gv)
    ul = _spacing(gv, mant, lowest)
    rows[r, ELEMENT_AT.flat] = c.I[k] if c.mapped else c.c0 + k
    rows[r, ELEMENT_AT.actual] = av
    rows[r, ELEMENT_AT.golden] = gv
    rows[r, ELEMENT_AT.abs_err] = ad
    rows[r, ELEMENT_AT.ulps] = ad / ul
    rows[r, ELEMENT_AT.badness] = c.BAD[k]
