"""The same-precision benchmark of the ``ratio`` standard (docs/compare.md, "Standards": the dual
benchmark), and what a kernel's own arithmetic cannot attain (docs/compare.md, "Too strict").

An independent naive float32 kernel: the spec's own formula blocks, which compute in whatever
dtype their arrays have, run on the case's inputs converted to float32 (exact for float16,
bfloat16 and float32 inputs), then rounded once to the output dtype. No second copy of any
formula: each operator record's ``benchmark`` runs the spec's formula blocks or dataflow in
float32.
"""

from __future__ import annotations

import numpy as np

from ... import ops
from ...goldens.format import GoldenFileError
from ...spec.dtypes import round_to
from ...spec.errors import one_line

__all__ = ["BenchmarkUnavailable", "float32_benchmark", "unattainable", "Attainable"]


class BenchmarkUnavailable(Exception):
    """The ratio standard has no benchmark for this operator or case."""


def float32_benchmark(case) -> dict[str, np.ndarray]:
    """Output name -> the float32 benchmark rounded to that output's dtype."""
    record = ops.find(case.op)
    benchmark = None if record is None else record.comparison.benchmark
    if benchmark is None:
        raise BenchmarkUnavailable(f"no float32 benchmark for {case.op}")
    raw = benchmark(record.call_of(case.params, case.input_arrays()))
    return {name: round_to(np.asarray(raw[name], dtype=np.float64), case.expected[name].dtype)
            for name in case.output_names if raw.get(name) is not None}


def unattainable(case) -> str:
    """Why a kernel computing the documented dataflow in its own arithmetic cannot attain the
    case's goldens (the operator record's ``comparison.unattainable``), "" when it can."""
    record = ops.find(case.op)
    check = None if record is None else record.comparison.unattainable
    if check is None or getattr(case, "expected_error", None) is not None:
        return ""
    return check(record.call_of(case.params, case.input_arrays()))


class Attainable:
    """Whether a kernel computing in its own arithmetic can attain a case's goldens, asked once
    per case, on its first failing output: ``answer()`` gives (why it cannot, "" when it can;
    why the question could not be answered, "" when it could)."""

    def __init__(self, case):
        self.case = case
        self._answer = None

    def answer(self) -> tuple[str, str]:
        if self._answer is None:
            try:
                self._answer = (unattainable(self.case), "")
            except GoldenFileError:
                raise                         # a damaged golden file is never an answer
            except Exception as exc:  # inputs the check cannot read: judged as they are
                self._answer = ("", one_line(exc))
        return self._answer
