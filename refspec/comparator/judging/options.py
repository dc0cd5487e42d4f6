"""``CompareOptions``: every choice of one comparison, from the command line (``refspec compare``,
``refspec run``) or ``refspec.compare``'s keyword arguments down to the judge of one output
(docs/compare.md: "Standards", "Judging", "Reports").

One object is built where the options are given and passed down unchanged; the judge's extra
passes and the parts of a parallel run make modified copies (``dataclasses.replace``).
"""

from __future__ import annotations

import numpy as np
from dataclasses import dataclass, replace

from ...goldens.selection import operator_ids, profiles
from ...inputs.output_map import Mapping, load_mapping
from ..sources.base import CompareUsageError
from .standards import RATIO_LEVELS, STANDARD_NAMES
from .streaming import READ_ELEMENTS

__all__ = ["CompareOptions", "COMPILED_ABOVE"]


#: outputs of at most this many elements are judged by the NumPy pass when ``fast`` is None
COMPILED_ABOVE = 1 << 16


@dataclass(frozen=True)
class CompareOptions:
    """The options of one comparison (``refspec.compare`` documents each keyword).

    The first eight fields are how each output is judged; then how blocks are read and judged;
    then which cases are judged and where."""

    standard: str = "default"
    rtol: float | None = None
    atol: float | None = None
    saturation: bool = False
    top: int = 10
    ratio_level: str | None = None
    heatmap_axes: str | None = None      # two axis letters, e.g. "SD"; None: the last two
    heatmaps: bool = False               # keep a 2-D max-badness map (for the HTML report)
    read_elements: int = READ_ELEMENTS
    #: None: the compiled pass for outputs of more than ``COMPILED_ABOVE`` elements, the NumPy
    #: pass (numpy_pass.py, the same report) for the others, so small comparisons never wait
    #: for numba to compile; True: the compiled pass for every output; False: the NumPy pass
    #: for every one
    fast: bool | None = None
    pool: object = None                  # an Executor: blocks of one output side by side
    cases: tuple | list | str | None = None       # ids or shell patterns
    mapping: object = None                # a Mapping or the path of a mapping file
    status: object = None                 # the kernel's status: an int or {case_id: code}
    only_present: bool = False
    operators: tuple | list | None = None
    case_ids: tuple | list | None = None
    jobs: int = 1
    scheduler: str | None = None
    socs: tuple | list | None = None
    diagnose: bool = True                 # failing outputs get their diagnosis
    allow_incomplete: bool = False        # judge against a golden file not marked complete

    def checked(self) -> "CompareOptions":
        """These options with the selection normalised (``socs`` as profiles, ``cases`` a
        list, the mapping loaded); ``CompareUsageError`` for options that cannot work."""
        self._check_standard()
        try:
            operator_ids(self.operators)
            socs = profiles(self.socs)
        except ValueError as exc:
            raise CompareUsageError(str(exc)) from None
        mapping = self.mapping
        if mapping is not None and not isinstance(mapping, Mapping):
            mapping = load_mapping(mapping)
        cases = [self.cases] if isinstance(self.cases, str) else self.cases
        return replace(self, socs=socs, mapping=mapping, cases=cases)

    def _check_standard(self) -> None:
        """The standard, its level and the overrides name something that exists."""
        standard, rtol, atol = self.standard, self.rtol, self.atol
        if standard not in STANDARD_NAMES:
            raise CompareUsageError(f"unknown standard {standard!r}; allowed: "
                                    f"{', '.join(STANDARD_NAMES)}")
        if standard == "ratio" and (rtol is not None or atol is not None):
            raise CompareUsageError("--rtol/--atol do not apply to the ratio standard (it judges "
                                    "error ratios against a benchmark)")
        if self.ratio_level is not None and self.ratio_level not in RATIO_LEVELS:
            raise CompareUsageError(f"unknown ratio level {self.ratio_level!r}; allowed: "
                                    f"{', '.join(RATIO_LEVELS)}")
        for name, v in (("rtol", rtol), ("atol", atol)):
            if v is not None and not (v >= 0 and np.isfinite(v)):
                raise CompareUsageError(f"{name} must be a finite number >= 0, got {v!r}")

    @property
    def overrides(self) -> dict:
        """The standard's numbers this run overrides (as the report shows them)."""
        return {k: v for k, v in (("rtol", self.rtol), ("atol", self.atol)) if v is not None}
