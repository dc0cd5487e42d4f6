"""Golden cases of the user's own inputs: case folders (``refspec.inputs.case_folders``),
msprobe dumps (``refspec.inputs.msprobe_calls``) and the vendor's UT data
(``refspec.inputs.vendor_ut``) all end here (docs/real_runs.md).

Each source first describes its cases without reading any data (every missing or inconsistent
piece is an ``InputError`` before anything is written); ``write_user_cases`` then
reads one case at a time, computes it by ``refspec.goldens.cases.compute_case`` exactly as
a generated case is computed (the profile's validation, a negative case with its aclnn code,
the exact outputs rounded once, the tolerance terms) and writes an ordinary golden file.
"""

from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Callable

from .. import goldens, ops
from ..goldens.cases import THREADED_ELEMENTS, CaseData, compute_case
from ..goldens.engine import Summary
from ..goldens.format import check_case_id
from .tensor_files import TensorFileError

__all__ = ["InputError", "UserCase", "UNSTATED", "RECORDED_KINDS", "write_user_cases", "check_ids",
           "attribute_value"]

#: a case whose description says nothing about the outcome the profile must give
UNSTATED = "unstated"


class InputError(ValueError):
    """User inputs that cannot make a case: one line naming where (folder and file, or dump
    record) and what was expected."""


def attribute_value(value) -> bool:
    """Whether a user's file may give ``value`` as an attribute: a number, a boolean, a label,
    or a list of numbers (RopeWithSinCosCache's mrope_section); its axis reads it."""
    if isinstance(value, (bool, int, float, str)):
        return True
    return (isinstance(value, (list, tuple)) and len(value) > 0
            and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value))


@dataclass
class UserCase:
    """One case described: where it comes from (``where``, for messages), its id, operator
    record, parameters (the spec's attributes through the record's axes; ``params["soc"]`` is
    the profile, ``params["dtype"]`` the dtype its outputs round to), and ``load()`` giving its
    inputs.
    ``expected_code`` is the aclnn code the description claims (None: accepted; UNSTATED: no
    claim); a different outcome is an InputError."""

    where: str
    case_id: str
    op: ops.Operator
    params: dict
    load: Callable[[], dict]
    seed: int = 0
    regenerate: str = ""
    expected_code: object = UNSTATED


def check_ids(cases: list[UserCase]) -> None:
    """Every case id valid and used once."""
    seen = {}
    for c in cases:
        try:
            check_case_id(c.case_id)
        except ValueError as exc:
            raise InputError(f"{c.where}: {exc}") from None
        if c.case_id in seen:
            raise InputError(f"{c.where}: case id {c.case_id!r} is also the id of "
                             f"{seen[c.case_id]}; give one of them another case_id")
        seen[c.case_id] = c.where


def _compute(case: UserCase, threads: int) -> CaseData:
    try:
        inputs = {k: v for k, v in case.load().items() if v is not None}
    except TensorFileError as exc:             # a file that changed since it was described
        raise InputError(f"{case.where}: {exc}") from None
    large = sum(v.size for v in inputs.values()) >= THREADED_ELEMENTS
    with (ThreadPoolExecutor(threads) if threads > 1 and large else nullcontext()) as pool:
        data = compute_case(case.op, case.case_id, case.params, case.seed, inputs, pool)
    got = None if data.error is None else data.error.code
    if case.expected_code is not UNSTATED and got != case.expected_code:
        said = "accepted" if case.expected_code is None else f"rejected with {case.expected_code}"
        found = "accepts them" if got is None else f"rejects them with {got} ({data.error})"
        raise InputError(f"{case.where}: the description says the inputs are {said}, but the "
                         f"spec for profile {case.params.get('soc') or 'math only'} {found}")
    return data


#: the ``sweep_name`` of a golden file made by ``refspec golden`` from a kernel's recorded runs
#: (case folders, an msprobe dump, a vendor UT folder): those files, the kernel's outputs
#: among them, are older than the golden file by nature
RECORDED_KINDS = ("case-folders", "msprobe", "vendor-ut")


def write_user_cases(out, cases: list[UserCase], *, sweep_name: str, sweep_definition: str,
                     compression: str = goldens.DEFAULT_COMPRESSION, force: bool = False,
                     progress=None) -> tuple[Summary, list]:
    """Compute and write ``cases`` to the golden file ``out``; returns the summary and the
    negative cases as (case id, AclnnError). ``progress(1)`` after each case."""
    start = time.perf_counter()
    check_ids(cases)
    summary = Summary(path=os.fspath(out))
    negatives = []
    threads = os.cpu_count() or 1
    writer = goldens.GoldenWriter(out, sweep_name=sweep_name, sweep_definition=sweep_definition,
                                  sweep_seed=0, compression=compression, force=force)
    try:
        for case in cases:
            data = _compute(case, threads)
            data.regenerate = case.regenerate
            writer.write_case(data)
            summary.cases += 1
            if data.negative:
                summary.negative += 1
                negatives.append((case.case_id, data.error))
            if progress:
                progress(1)
        summary.nbytes = writer.bytes_written
        writer.close()
    except BaseException:        # nothing half-written stays: the .part is this run's own
        writer.discard()
        raise
    summary.file_bytes = os.path.getsize(summary.path) if os.path.exists(summary.path) else 0
    summary.seconds = time.perf_counter() - start
    return summary, negatives
