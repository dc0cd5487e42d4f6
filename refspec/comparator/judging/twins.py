"""The two 16-bit dtypes a kernel may confuse: float16 and bfloat16 are both 2 bytes, so a raw
file cannot tell them apart (docs/compare.md, "Diagnosis": ``dtype``). One test, asked by the
judge's hint on the first elements of a failing output and by the diagnosis's ``dtype`` finding
on its sample: read as the twin dtype, the kernel's bits agree with the golden on at least
``TWIN_AGREES`` of the elements, and on more than ``TWIN_MARGIN`` more of them than read as they
are. Agreement is the same whatever the standard in force: within the Ascend mixed tolerance of
the dtype the bits are read as (``TWIN_RULES``: rtol = atol = 2^-10 for float16, 2^-7 for
bfloat16), a NaN with a NaN and an infinity with the same infinity (``agreement.agrees``)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...spec.dtypes import resolve_dtype
from .agreement import agrees
from .standards import ASCEND_MIXED, Rule

__all__ = ["TWINS", "TWIN_RULES", "TWIN_AGREES", "TWIN_MARGIN", "TwinReading", "read_as_twin"]

#: each 16-bit dtype and the one a kernel may have written instead
TWINS = {"float16": "bfloat16", "bfloat16": "float16"}
#: what an element read as each dtype must be within to agree
TWIN_RULES = {d: Rule("ascend-mixed", rtol=ASCEND_MIXED[d][0], atol=ASCEND_MIXED[d][1])
              for d in TWINS}
#: the share of the elements that must agree when read as the twin dtype
TWIN_AGREES = 0.99
#: and how much more of them than when read as they are
TWIN_MARGIN = 0.5


@dataclass(frozen=True)
class TwinReading:
    """A kernel's bits read as the ``twin`` dtype: per element whether they then agree with the
    golden (``agree``), and whether they do read as they are (``as_is``)."""

    twin: str
    agree: np.ndarray
    as_is: np.ndarray

    @property
    def share(self) -> float:
        """The share of the elements that agree read as the twin."""
        return float(self.agree.mean())

    @property
    def share_as_is(self) -> float:
        return float(self.as_is.mean())

    @property
    def holds(self) -> bool:
        """The test: the bits are the twin dtype's."""
        return self.share >= TWIN_AGREES and self.share > self.share_as_is + TWIN_MARGIN


def read_as_twin(raw: np.ndarray, g: np.ndarray, dtype: str) -> TwinReading | None:
    """The kernel's values ``raw`` (in the output dtype ``dtype``, flattened) against the exact
    golden ``g`` (float64), read as they are and as the twin dtype; None for a dtype without a
    twin."""
    twin = TWINS.get(dtype)
    if twin is None:
        return None
    raw = np.ascontiguousarray(raw).reshape(-1)
    other = raw.view(np.uint16).view(resolve_dtype(twin))
    return TwinReading(twin, _agree(other, g, twin), _agree(raw, g, dtype))


def _agree(values: np.ndarray, g: np.ndarray, dtype: str) -> np.ndarray:
    return agrees(TWIN_RULES[dtype], dtype, None, values.astype(np.float64), values, g, None)
