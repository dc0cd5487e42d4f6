"""What every source of actual outputs answers (docs/compare.md, "Actual outputs"):
``ActualSource``; the file stems an output may be written under; the status file a kernel writes
beside its outputs.

A source answers ``lookup(case_id, op, output, golden dtype, golden shape)`` with an
``ActualArray`` or a ``Problem`` (``refspec.comparator.sources.arrays``), and ``status(case_id)``
with the status the kernel returned. The sources: directory trees
(``refspec.comparator.sources.trees``), ``.npz``/``.npy`` files (``npz``), HDF5 files
(``hdf5``), msprobe dumps (``msprobe_dumps``), Python arrays (``memory``) and an
implementation's functions (``implementation``); ``refspec.comparator.sources.opening``
chooses one for a path.
"""

from __future__ import annotations

import json
import os

import numpy as np

from ... import ops
from ...spec.errors import one_line

__all__ = ["ActualSource", "CompareUsageError", "file_names", "read_status", "UNKNOWN_CODE"]

#: the status of a case the kernel rejected without an aclnn code (an exception without one)
UNKNOWN_CODE = -1


class CompareUsageError(ValueError):
    """Arguments that cannot work (unknown standard, unusable actual path, bad mapping)."""


def file_names(output: str, op: str | None) -> list[str]:
    """File stems an output may be written under: aclnn camelCase (``gradQuery``), the Python
    name (``grad_query``) and aclnn spellings with suffixes (``dxOut``), as the operator's
    record names them (camelCase and the Python name for an operator without a record)."""
    record = None if op is None else ops.find(op)
    if record is None:
        return list(dict.fromkeys((ops.camel_case(output), output)))
    return record.file_stems(output)


def read_status(path: str):
    """``(code, None)`` from a status file ``{"code": N}`` (0: the kernel accepted the input),
    ``(None, None)`` when there is none, ``(None, why)`` when it cannot be read."""
    if not os.path.lexists(path):
        return None, None
    try:
        with open(path, "rb") as fh:
            text = fh.read()
    except OSError as exc:
        return None, f"{path}: cannot be read ({one_line(exc)}); {_STATUS_EXPECTED}"
    if not text.strip():
        return None, f"{path}: empty; {_STATUS_EXPECTED}"
    try:
        doc = json.loads(text.decode("utf-8"))
    except UnicodeDecodeError:
        return None, f"{path}: not UTF-8 text; {_STATUS_EXPECTED}"
    except json.JSONDecodeError as exc:
        return None, (f"{path}: not JSON ({exc.msg} at line {exc.lineno}, column {exc.colno}); "
                      f"{_STATUS_EXPECTED}")
    code = doc.get("code") if isinstance(doc, dict) else None
    if not isinstance(code, int) or isinstance(code, bool):
        return None, f"{path}: {_STATUS_EXPECTED}, got {one_line(doc)[:80]}"
    return code, None


#: what a status file holds
_STATUS_EXPECTED = ("expected {\"code\": <integer>} (0 when the kernel accepted the input, else "
                    "the aclnn status it returned)")


class ActualSource:
    """Base class: ``lookup(case_id, op, output, dtype, shape)`` and ``status(case_id)``;
    ``single_case`` is set by the comparator when only one case is judged (then bare output
    names are accepted)."""

    kind = "?"
    single_case: str | None = None

    def __init__(self, path: str):
        self.path = path

    def lookup(self, case_id: str, op: str, output: str, dtype: np.dtype, shape):
        raise NotImplementedError

    def status(self, case_id: str):
        """The status the kernel returned for a case, as ``read_status`` gives it;
        ``(None, None)`` for sources that hold none."""
        return None, None

    def status_file(self, case_id: str) -> str | None:
        """The file the status of a case is read from (None for sources that hold none)."""
        return None

    def reference(self, case):
        """The golden case the source's outputs are judged against: ``case`` itself, unless
        the source ran an implementation whose own saved values the reference must use."""
        return case

    def rejection(self, case_id: str) -> str:
        """What the kernel said when it rejected a case ("" when the source does not know)."""
        return ""

    def not_run_reason(self, case_id: str) -> str:
        """Why a case with nothing to judge was not run ("": the comparator says it)."""
        return ""

    def notes(self) -> list[str]:
        """What the reader of the report should know about where the outputs came from (the
        report's notes), once the outputs have been looked up."""
        return []

    @property
    def timings(self) -> dict:
        """Seconds per case id, for sources that ran the implementation themselves."""
        return {}

    def close(self) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False
