"""The fused step: every per-element quantity of one block in one compiled pass (numba).

``fused_block`` computes, element by element, exactly the operations of the reference step
(``refspec.comparator.judge.BlockJudge._step_reference``, docs/compare.md "Judging"): the
actual decoded from its bits to float64, d = a - g, |d|, the dtype's spacing at |g| (a power of
two from the exponent bits of g), ulps = |d| / spacing, the badness of the rule's checks in the
reference's order of operations, and accumulates what ``refspec.comparator.metrics.
Accumulator`` keeps: counts, maxima with their elements (first occurrence), the ulp histogram,
the small-value counts, the relative errors, the top-k worst elements under the report's total
order (badness, then |a - g| descending, then flat index ascending) and the optional 2-D map.
The float sums behind RMSE, cosine similarity and the mean relative error are added in four
lanes per chunk of ``CHUNK`` elements, so they agree with the reference's per-step sums to
a few float64 roundings, not bit for bit. Elements that are not numeric (NaN or an infinity in the actual, a
golden that rounds to an infinity) are only listed: the caller judges them as the reference
does.

The function is compiled on first use and cached on disk (``cache=True``); it releases the GIL,
so blocks are judged in threads side by side.
"""

from __future__ import annotations

import math

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic

from .metrics import ELEMENT, FLOATS, INTS, NBINS

__all__ = ["fused_block", "KIND", "FLAGS", "PARAMS", "INTS", "FLOATS", "ELEMENT",
           "CHUNK"]

#: codes of the output dtypes (how the kernel decodes an actual's bits)
KIND = {"float32": 0, "float16": 1, "bfloat16": 2, "float64": 3}
#: positions in the int64 ``flags`` argument
FLAGS = ("has_rule", "bitwise", "has_rtol", "data_atol", "hard_bound", "rounding_gate",
         "eval_bound", "top", "heat", "exempt_rounded")
#: positions in the float64 ``params`` argument
PARAMS = ("rtol", "atol", "c_sqrt_k", "gamma", "underflow", "gate_slack", "gamma_e",
          "eval_underflow", "overflow", "sv", "e_small", "mant", "lowest")

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
def fused_block(a, e, g, S, kind, flags, params, flat0, heat, geom, ints, floats, hist,
                top, elems, special):
    """One block: ``a`` the actual's bits, ``e`` the rounded golden's bits (copies; else
    empty), ``g`` the exact golden, ``S`` the sums of |terms| (empty when unused), all C order
    from flat index ``flat0``; ``kind`` the output dtype's code (``KIND``). Results go to ``ints``/``floats`` (``INTS``, ``FLOATS``),
    ``hist`` (ulp histogram), ``top`` (rows ``ELEMENT``, best first), ``elems`` (rows of the
    max |a - g| and the max relative error), ``special`` (positions of non-numeric elements;
    ``ints[5]`` says how many, also beyond its size) and, when ``flags[8]``, ``heat`` (max
    badness per cell; ``geom`` = row stride, rows, column stride, columns).

    The block goes in chunks of ``CHUNK`` elements. A chunk whose elements are all numeric
    is judged where it lies; otherwise its numeric elements are gathered first and the others
    listed. Each chunk takes a few short loops without branches, which the compiler
    vectorises (decoding; the badness; the histogram bins; the sums, counts and maxima), then
    looks for the positions of new maxima and worst elements only where a chunk holds one."""
    n = g.size
    has_S = S.size > 0
    A = np.empty(CHUNK)
    E = np.empty(CHUNK)
    G = np.empty(CHUNK)
    SB = np.empty(CHUNK)
    BAD = np.empty(CHUNK)
    I = np.empty(CHUNK, np.int64)
    B = np.empty(CHUNK, np.int64)
    st = np.zeros(16)                   # sums 0-4, max badness 5, max |d| 7, max rel 8, small 9
    st[7] = -1.0
    st[8] = -1.0
    st[9] = -1.0
    ist = np.zeros(8, np.int64)
    H = np.zeros((8, hist.size), np.int64)
    bitwise = flags[0] != 0 and (flags[1] != 0 or flags[9] != 0)
    overflow = params[8]
    for c0 in range(0, n, CHUNK):
        c1 = min(c0 + CHUNK, n)
        m = c1 - c0
        nn = _decode_run(a, g, c0, m, kind, A, overflow)
        if bitwise:
            _decode_run(e, g, c0, m, kind, E, overflow)
        if nn == 0:
            _chunk(A, E, g[c0:c1], S[c0:c1] if has_S else g[c0:c1], m, has_S, False, I, c0,
                   kind, flags, params, flat0, heat, geom, st, ist, H, top, elems,
                   BAD, B)
            continue
        q = 0
        for k in range(m):
            av = A[k]
            gv = g[c0 + k]
            if math.isfinite(av) and abs(gv) < overflow:
                A[q] = av
                E[q] = E[k]
                G[q] = gv
                SB[q] = S[c0 + k] if has_S else 0.0
                I[q] = c0 + k
                q += 1
            else:
                if ist[5] < special.size:
                    special[ist[5]] = c0 + k
                ist[5] += 1
        if q:
            _chunk(A[:q], E[:q], G[:q], SB[:q], q, has_S, True, I, c0, kind, flags, params,
                   flat0, heat, geom, st, ist, H, top, elems, BAD, B)
    for k in range(7):
        ints[k] = ist[k]
    for r in range(8):
        for b in range(hist.size):
            hist[b] += H[r, b]
    floats[0] = st[5]
    floats[1] = st[9]
    for k in range(4):
        floats[2 + k] = st[k]
    floats[6] = st[4]


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
    ``refspec.comparator.floatinfo.ulp_at``."""
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
def _chunk(A, E, G, Sx, m, has_S, mapped, I, c0, kind, flags, params, flat0, heat,
           geom, st, ist, hist, top, elems, BAD, B):
    """The ``m`` numeric elements ``A`` (decoded actual), ``G`` (exact golden), ``Sx`` (sums of
    |terms|, when ``has_S``) of one chunk, at local flat index ``I[k]`` when ``mapped``, else
    ``c0 + k``: adds to the sums and maxima ``st``, the counts ``ist``, the histogram, the top
    rows, the extreme elements and the map. ``BAD`` and ``B`` are scratch."""
    has_rule = flags[0] != 0
    with_rtol = has_rule and flags[2] != 0
    data = flags[3] != 0 and has_S
    hard = has_rule and flags[4] != 0 and has_S
    gate = has_rule and flags[5] != 0
    evalb = flags[6] != 0 and has_S and (with_rtol or hard or gate)
    copy = has_rule and flags[1] != 0
    T, want_heat = flags[7], flags[8]
    rtol, atol, c_sqrt_k, gamma, underflow = params[0], params[1], params[2], params[3], params[4]
    slack, gamma_e, eval_uf = params[5], params[6], params[7]
    sv, e_small = params[9], params[10]
    mant = np.int64(params[11])
    lowest = np.int64(params[12])
    # badness: the rule's allowances combined into one: the largest of the ratios ad/t_i is
    # ad/min(t_i), then min with ad/eb is ad/max(., eb) (correctly rounded division is
    # monotonic in the divisor), so one division gives the reference's value exactly
    if copy:
        for k in range(m):
            av = A[k]
            ev = E[k]
            gv = G[k]
            differ = (ev != av) | (math.copysign(1.0, ev) != math.copysign(1.0, av))
            ul = _spacing(gv, mant, lowest)
            ad = abs(av - gv)
            ulps = ad / ul
            BAD[k] = (1.0 + ulps + 0.0009765625) if differ else 0.0
    elif not has_rule:
        for k in range(m):
            BAD[k] = 0.0
    else:
        for k in range(m):
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
        if flags[9] != 0:                # the rounded golden's own value passes
            for k in range(m):
                av = A[k]
                ev = E[k]
                same = (ev == av) & (math.copysign(1.0, ev) == math.copysign(1.0, av))
                BAD[k] = 0.0 if same else BAD[k]
    if kind == 3:
        for k in range(m):
            gv = G[k]
            B[k] = _bin(abs(A[k] - gv) / _spacing(gv, mant, lowest))
    else:                               # 1 / spacing is a float64 too: multiply (same value)
        for k in range(m):
            gv = G[k]
            B[k] = _bin(abs(A[k] - gv) * _inverse_spacing(gv, mant, lowest))
    sums = np.empty(5)
    mr = _sums(A, G, m, sv, sums)
    counts = _counts(A, G, BAD, m, sv, e_small)
    for q in range(5):
        st[q] += sums[q]
    ist[0] += m
    ist[1] += counts[0]
    ist[2] += counts[1]
    ist[3] += counts[2]
    ist[4] += m - counts[1]
    cbad = _bits_f64(counts[3])
    cad = _bits_f64(counts[4])
    crel = _bits_f64(mr) if counts[1] < m else -1.0
    csmall = _bits_f64(counts[5]) if counts[1] > 0 else -1.0
    for k in range(m):                  # eight histograms: no wait on the last increment
        hist[k & 7, B[k]] += 1
    if cbad > st[5]:
        st[5] = cbad
    if csmall > st[9]:
        st[9] = csmall
    if cad > st[7]:                     # the first element with the chunk's largest |d|
        st[7] = cad
        k = 0
        while abs(A[k] - G[k]) != cad:
            k += 1
        _element(elems, 0, k, mapped, I, c0, A, G, BAD, mant, lowest)
    if crel > st[8]:
        st[8] = crel
        k = 0
        while abs(G[k]) < sv or abs(A[k] - G[k]) / abs(G[k]) != crel:
            k += 1
        _element(elems, 1, k, mapped, I, c0, A, G, BAD, mant, lowest)
    if T > 0 and (ist[6] < T or cbad >= top[T - 1, 5]):
        for k in range(m):
            bad = BAD[k]
            ad = abs(A[k] - G[k])
            nt = ist[6]
            if nt < T or bad > top[T - 1, 5] or (bad == top[T - 1, 5] and ad > top[T - 1, 3]):
                j = nt if nt < T else T - 1
                while j > 0 and (bad > top[j - 1, 5] or (bad == top[j - 1, 5] and ad > top[j - 1, 3])):
                    for c in range(6):
                        top[j, c] = top[j - 1, c]
                    j -= 1
                _element(top, j, k, mapped, I, c0, A, G, BAD, mant, lowest)
                if nt < T:
                    ist[6] = nt + 1
    if want_heat:
        for k in range(m):
            flat = flat0 + (I[k] if mapped else c0 + k)
            row = (flat // geom[0]) % geom[1]
            col = (flat // geom[2]) % geom[3]
            v = min(BAD[k], 1e300)
            if v > heat[row, col]:
                heat[row, col] = v


@njit(nogil=True, error_model="numpy", fastmath={"reassoc"})
def _sums(A, G, m, sv, out):
    """sum d^2, a*g, a^2, g^2 and of the relative errors |d|/|g| of non-small elements into
    ``out`` (the compiler may add them in any order: they agree with other orders to a few
    roundings); returns the bit pattern of the largest relative error (exact)."""
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
    out[0] = s0
    out[1] = s1
    out[2] = s2
    out[3] = s3
    out[4] = s4
    return mr


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
    out = np.empty(6, np.int64)
    out[0] = fails
    out[1] = n_small
    out[2] = small_err
    out[3] = mb
    out[4] = ma
    out[5] = ms
    return out


@njit(inline="always")
def _element(out, r, k, mapped, I, c0, A, G, BAD, mant, lowest):
    """Row ``r`` of ``out``: element k of the chunk (``ELEMENT``)."""
    av = A[k]
    gv = G[k]
    ad = abs(av - gv)
    ul = _spacing(gv, mant, lowest)
    out[r, 0] = I[k] if mapped else c0 + k
    out[r, 1] = av
    out[r, 2] = gv
    out[r, 3] = ad
    out[r, 4] = ad / ul
    out[r, 5] = BAD[k]
