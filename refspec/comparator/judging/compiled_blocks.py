"""An output's blocks through the compiled pass (docs/compare.md, "How an output is judged"):
``CompiledBlocks`` hands each block to ``refspec.comparator.judging.compiled_pass.fused_block``
with the rule's numbers (``bounds.ElementBounds``) and merges what it found into the
``metrics.Accumulator``, in flat order. The special values it lists are matched by
``special_values.add_special``; a block with more of them than it lists goes through the NumPy
pass (``numpy_pass.numpy_block``) instead.
"""

from __future__ import annotations

import numpy as np

from .bounds import ElementBounds
from .floatinfo import bits_of
from .metrics import Accumulator, BlockResults
from .numpy_pass import numpy_block
from .special_values import add_special

__all__ = ["CompiledBlocks"]

_EMPTY = np.empty(0, np.float64)


class CompiledBlocks:
    """One output judged block by block by the compiled pass under ``bounds`` into ``acc``.

    ``compute`` touches nothing shared (but the 2-D map, when there is one), so blocks may be
    computed in threads; ``merge`` adds a computed block in flat order. The compiled pass gives
    the NumPy pass's verdicts, counts, maxima, elements and histogram; the float sums of RMSE,
    cosine and the mean relative error to a few float64 roundings."""

    def __init__(self, bounds: ElementBounds, acc: Accumulator):
        self.bounds = bounds
        self.acc = acc
        self._pass_args = None

    def _pass_setup(self):
        """The compiled pass's arguments that are the same for every block: the dtype's code,
        the rule's ``Flags`` and ``Params``, the ``HeatMap`` (a 1 x 1 dummy without a map)."""
        from .compiled_pass import FLAGS, KIND, PARAMS, Flags, HeatMap, Params    # numba, when needed
        b, acc = self.bounds, self.acc
        r, info = b.rule, b.info
        on = dict.fromkeys(FLAGS, 0)
        geometry = acc.heat_geometry()
        on.update(has_rule=int(r is not None), top=int(acc.top), heat=int(geometry is not None),
                  counts_rounded=int(b.counts_rounded))
        numbers = dict.fromkeys(PARAMS, 0.0)
        if r is not None:
            on.update(bitwise=r.bitwise, has_rtol=r.rtol is not None, data_atol=r.data_atol,
                      hard_bound=r.hard_bound, rounding_gate=r.rounding_gate,
                      eval_bound=r.eval_bound, exempt_rounded=r.exempt_rounded)
            numbers.update(rtol=r.rtol or 0.0, atol=r.atol or 0.0)
        numbers.update(c_sqrt_k=b.c_sqrt_k, gamma=b.gamma, underflow=b.underflow,
                       gate_slack=b.gate_slack, gamma_e=b.gamma_e,
                       eval_underflow=b.eval_underflow, overflow=info.overflow,
                       sv=acc.sv, e_small=acc.e_small, mant=info.mant, lowest=info.emin + 1023)
        flags = Flags(**{k: int(v) for k, v in on.items()})
        params = Params(**{k: float(v) for k, v in numbers.items()})
        heat = HeatMap(*(geometry or (np.zeros((1, 1)), 1, 1, 1, 1)))
        self._pass_args = (KIND[info.name], flags, params, heat)
        return self._pass_args

    def compute(self, flat0: int, a: np.ndarray, g: np.ndarray, e: np.ndarray | None,
                S: np.ndarray | None) -> BlockResults:
        """The compiled pass over one block (no shared state is changed but the 2-D map, so
        blocks may be computed side by side when there is none)."""
        from .compiled_pass import Block, Results, fused_block
        kind, flags, params, heat = self._pass_args or self._pass_setup()
        b = self.bounds
        bits = bits_of(a)
        e_bits = bits_of(e) if e is not None and b.needs_expected else bits[:0]
        S = _EMPTY if S is None or not b.uses_sum_abs else np.ascontiguousarray(S, np.float64)
        g = np.ascontiguousarray(g, np.float64)
        out = BlockResults(flat0, a.size, max(self.acc.top, 0))
        fused_block(Block(bits, e_bits, g, S, kind, int(flat0)), flags, params, heat,
                    Results(out.ints, out.floats, out.hist, out.top, out.elems, out.special))
        n_spec = out.counts().n_special
        if n_spec > out.special.size:            # many special values: the NumPy pass
            out.arrays = (a.copy(), g.copy(), None if e is None else e.copy(),
                          None if S.size == 0 else S.copy())
        elif n_spec:
            where = out.special[:n_spec]
            out.special_values = (where.copy(), a[where].astype(np.float64), g[where].copy())
        return out

    def merge(self, out: BlockResults) -> None:
        """Add a computed block to the metrics (blocks in flat order)."""
        if out.arrays is not None:
            numpy_block(self.bounds, self.acc, out.flat0, *out.arrays)
            return
        self.acc.count(out.n)
        if out.special_values is not None:
            add_special(self.bounds, self.acc, out.flat0, *out.special_values)
        self.acc.add_block_results(out)
