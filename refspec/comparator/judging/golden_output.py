"""``GoldenOutput``: what the judge needs of one output of a golden case, read once from the
case's metadata (docs/compare.md, "Judging": the output's dtype, comparison class and K choose
its rule; its exact float64 values are what every element is judged against). The 8-bit codes
of quantised caches (int8, float8_e4m3fn, float8_e5m2, hifloat8) are output dtypes too; a cache
updated in place (class ``cache``) has the shape of the whole cache (``expected/``), its exact
values one per written offset, and the class of those values (``written_class``)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...goldens.format import CASE_SUBGROUPS
from ...spec.dtypes import dtype_name, resolve_dtype
from ...spec.quant_dtypes import QUANT_NAMES
from ...spec.terms import CACHE
from .naming import axis_names

__all__ = ["GoldenOutput", "golden_output", "output_dtype", "check_golden_case"]


@dataclass(frozen=True, eq=False)
class GoldenOutput:
    """One golden output: ``dtype`` (np.dtype) and its ``dtype_name``, ``shape``, the
    ``comparison_class`` and ``K`` (reduced terms) of its rule, its axis letters ``axes`` ("" when
    not known) and ``exact``, the exact values (an array or a LazyArray the judge reads); a
    cache's ``written_class`` (the class of the values the call writes, else None)."""

    name: str
    dtype: np.dtype
    dtype_name: str
    shape: tuple
    comparison_class: str | None
    K: int | None
    axes: str
    exact: object
    written_class: str | None = None

    @property
    def judged_class(self) -> str | None:
        """The class whose rule judges the values: a cache's written values', else its own."""
        return self.written_class if self.comparison_class == CACHE else self.comparison_class

    @property
    def axis_names(self) -> tuple[str, ...]:
        """The name of each axis (``naming.axis_names``)."""
        return axis_names(self.axes, len(self.shape))


def golden_output(case, name: str) -> GoldenOutput:
    """The golden output ``name`` of ``case``, its exact values opened once."""
    meta = case.output_meta(name)
    exact = case.exact[name]
    if meta.get("dtype"):
        dt = output_dtype(meta["dtype"])
    else:                                # files that do not name the dtype
        dt = np.dtype(case.expected[name].dtype)
    cls = meta.get("comparison_class")
    shape = tuple(case.expected[name].shape if cls == CACHE else exact.shape)
    return GoldenOutput(name=name, dtype=dt, dtype_name=meta.get("dtype") or dtype_name(dt),
                        shape=shape, comparison_class=cls, K=meta.get("reduced_terms"),
                        axes=meta.get("axes") or "", exact=exact,
                        written_class=meta.get("written_class") if cls == CACHE else None)


#: the quantised dtypes by the names the golden file gives them
_CODES = {n: d for d, n in QUANT_NAMES.items()}


def output_dtype(name: str) -> np.dtype:
    """The dtype an output's metadata names: a float dtype, or the codes of a quantised one."""
    return _CODES[name] if name in _CODES else np.dtype(resolve_dtype(name))
def check_golden_case(case) -> None:
    """Every dataset of a golden file's case checked before anything of it is judged
    (``refspec.goldens.LazyArray.check``: stored in the file, of the dtype and shape the
    index gives, a small contiguous one against its CRC-32; a chunked one's Fletcher32
    checksum is checked as the pass reads it). Only the datasets the file holds: a case
    computed in memory, and the sums a file of schema 1 lacks, have nothing to check.
    ``refspec.goldens.CorruptGoldenError`` names the file, the case and the dataset."""
    meta = getattr(case, "meta", None)
    described = meta.get("arrays", {}) if isinstance(meta, dict) else {}
    for group in CASE_SUBGROUPS:
        arrays = getattr(case, group, None)
        for name in described.get(group, {}) if arrays is not None else ():
            check = getattr(arrays[name], "check", None)
            if check is not None:
                check()
