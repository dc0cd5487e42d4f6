"""The two 16-bit dtypes a kernel may confuse: float16 and bfloat16 are both 2 bytes, so a raw
file cannot tell them apart (docs/compare.md, "Diagnosis": ``dtype``). One test, asked by the
judge's hint on the first elements of a failing output and by the diagnosis's ``dtype`` finding
on its sample: the kernel's bits read as the twin dtype agree with the golden, by the standard's
own element checks for the twin dtype (``agreement.agrees``), on at least ``TWIN_AGREES`` of the
elements and on more than ``TWIN_MARGIN`` more of them than the bits read as they are."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...spec.dtypes import resolve_dtype
from .agreement import agrees
from .standards import Rule, resolve_rule

__all__ = ["TWINS", "TWIN_AGREES", "TWIN_MARGIN", "TwinReading", "read_as_twin"]

#: each 16-bit dtype and the one a kernel may have written instead
TWINS = {"float16": "bfloat16", "bfloat16": "float16"}
#: the share of the elements that must agree when read as the twin dtype
TWIN_AGREES = 0.99
#: and how much more of them than when read as they are
TWIN_MARGIN = 0.5


@dataclass(frozen=True)
class TwinReading:
    """A kernel's bits read as the ``twin`` dtype: per element whether they then agree with the
    golden (``agree``), and the share that agrees read as they are (``as_is``)."""

    twin: str
    agree: np.ndarray
    as_is: float

    @property
    def share(self) -> float:
        return float(self.agree.mean())

    @property
    def holds(self) -> bool:
        """The test: the bits are the twin dtype's."""
        return self.share >= TWIN_AGREES and self.share > self.as_is + TWIN_MARGIN


def read_as_twin(raw: np.ndarray, g: np.ndarray, S, dtype: str, rule: Rule, cls, K,
                 as_is: float) -> TwinReading | None:
    """The kernel's values ``raw`` (in the output dtype ``dtype``) read as its twin against the
    exact golden ``g``, by ``rule``'s standard for the twin dtype (the default standard's for
    the ratio standard), with the comparison class ``cls``, ``K`` and the sums of |terms| ``S``
    (or None); ``as_is`` the share that agrees read as they are. None for a dtype without a
    twin."""
    twin = TWINS.get(dtype)
    if twin is None:
        return None
    other = np.ascontiguousarray(raw).view(np.uint16).view(resolve_dtype(twin))
    standard = "default" if rule.ratio_level else rule.standard
    twin_rule = resolve_rule(standard, twin, cls, K)
    return TwinReading(twin, agrees(twin_rule, twin, K, other.astype(np.float64), other, g, S),
                       as_is)
