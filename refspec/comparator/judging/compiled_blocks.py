"""``BlockJudge``: one output judged block by block under a rule (docs/compare.md, "Judging").

For each block: special values are matched by position (NaN matches NaN whatever its sign or
payload, +Inf only +Inf; with ``saturation`` a max-finite value is accepted where the golden is
an infinity of the same sign, both sides clipped to the finite range); every other element gets
a *badness* = |a - g| divided by what the rule allows (> 1 fails), from the checks of its
``refspec.comparator.standards.Rule``. ``refspec.comparator.metrics.Accumulator`` keeps the
metrics.
"""

from __future__ import annotations

import math

import numpy as np

from ...spec.dtypes import round_to
from . import numpy_pass
from .floatinfo import U_ACC, bits_of, float_info
from .metrics import Accumulator, FusedBlock
from .standards import C_REDUCTION, ELEMENT_ROUNDINGS, ROUNDING_SLACK_U32, TERM_ROUNDINGS, \
    UNDERFLOW, Rule

__all__ = ["BlockJudge"]

_EMPTY = np.empty(0, np.float64)


class BlockJudge:
    """Evaluates one output block by block under ``rule`` (None: metrics only, as for the
    benchmark of the ratio standard).

    The fused pass (``refspec.comparator.fused.fused_block``, one compiled pass per block:
    ``compute`` and ``merge``) is the product's; ``refspec.comparator.oracle`` is the plain
    NumPy step the tests hold it to (the same verdicts, counts, maxima, elements and
    histogram; the float sums of RMSE, cosine and the mean relative error to a few float64
    roundings), and the fused pass hands it the blocks with more special values than it lists.
    ``compute`` touches nothing shared, so blocks may be computed in threads; ``merge`` adds a
    computed block in flat order."""

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

    def _fused_setup(self):
        """The compiled pass's arguments that are the same for every block: the dtype's code,
        the rule's ``Flags`` and ``Params``, the ``HeatMap`` (a 1 x 1 dummy without a map)."""
        from .compiled_pass import FLAGS, KIND, PARAMS, Flags, HeatMap, Params    # numba, when needed
        r, info, acc = self.rule, self.info, self.acc
        on = dict.fromkeys(FLAGS, 0)
        geometry = acc.heat_geometry()
        on.update(has_rule=int(r is not None), top=int(acc.top), heat=int(geometry is not None))
        numbers = dict.fromkeys(PARAMS, 0.0)
        if r is not None:
            on.update(bitwise=r.bitwise, has_rtol=r.rtol is not None, data_atol=r.data_atol,
                      hard_bound=r.hard_bound, rounding_gate=r.rounding_gate,
                      eval_bound=r.eval_bound, exempt_rounded=r.exempt_rounded)
            numbers.update(rtol=r.rtol or 0.0, atol=r.atol or 0.0)
        numbers.update(c_sqrt_k=self.c_sqrt_k, gamma=self.gamma, underflow=self.underflow,
                       gate_slack=ROUNDING_SLACK_U32 * U_ACC, gamma_e=self.gamma_e,
                       eval_underflow=ELEMENT_ROUNDINGS * UNDERFLOW, overflow=info.overflow,
                       sv=acc.sv, e_small=acc.e_small, mant=info.mant, lowest=info.emin + 1023)
        flags = Flags(**{k: int(v) for k, v in on.items()})
        params = Params(**{k: float(v) for k, v in numbers.items()})
        heat = HeatMap(*(geometry or (np.zeros((1, 1)), 1, 1, 1, 1)))
        self._fused_args = (KIND[info.name], flags, params, heat)
        return self._fused_args

    def compute(self, flat0: int, a: np.ndarray, g: np.ndarray, e: np.ndarray | None,
                S: np.ndarray | None) -> FusedBlock:
        """The fused pass over one block (no shared state is changed but the 2-D map, so
        blocks may be computed side by side when there is none)."""
        from .compiled_pass import Block, Results, fused_block
        kind, flags, params, heat = self._fused_args or self._fused_setup()
        bits = bits_of(a)
        e_bits = bits_of(e) if e is not None and self.needs_expected else bits[:0]
        S = _EMPTY if S is None or not self.uses_sum_abs else np.ascontiguousarray(S, np.float64)
        g = np.ascontiguousarray(g, np.float64)
        out = FusedBlock(flat0, a.size, max(self.acc.top, 0))
        fused_block(Block(bits, e_bits, g, S, kind, int(flat0)), flags, params, heat,
                    Results(out.ints, out.floats, out.hist, out.top, out.elems, out.special))
        n_spec = out.counts().n_special
        if n_spec > out.special.size:            # many special values: the oracle's step
            out.arrays = (a.copy(), g.copy(), None if e is None else e.copy(),
                          None if S.size == 0 else S.copy())
        elif n_spec:
            where = out.special[:n_spec]
            out.special_values = (where.copy(), a[where].astype(np.float64), g[where].copy())
        return out

    def merge(self, out: FusedBlock) -> None:
        """Add a computed block to the metrics (blocks in flat order)."""
        if out.arrays is not None:
            numpy_pass.block_reference(self, out.flat0, *out.arrays)
            return
        self.acc.count(out.n)
        if out.special_values is not None:
            self.special(out.flat0, *out.special_values)
        self.acc.add_fused(out)

    def special(self, flat0, where, a, gs):
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
