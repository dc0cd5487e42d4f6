"""Export golden cases to the vendor test scripts' file layout (spec/dumps.md, docs/goldens.md).

``DIR/<case_id>/`` (the case id's '/' parts as nested directories) gets one file per input named
after its aclnn parameter (``dy.bin``, ``gradQueryOutput.bin``), ``golden_<output>.bin`` per
expected output and ``case.json`` describing every file. ``.bin`` is ``ndarray.tofile``: raw,
little-endian, C order, bfloat16 as its 16-bit patterns; ``.npy`` is NumPy's format (what
``np.save`` writes), bfloat16 saved as uint16 bits. ``case.json`` also says what the kernel's
harness writes back: ``<output>.bin`` per output, and ``status.json`` with the status the
kernel returned, ``{"code": 0}`` when it accepted the input or ``{"code": 561002}`` (its aclnn
code) when it rejected it; ``expected_code`` is the code the case expects (0 for a positive
case), which ``refspec compare`` checks (docs/compare.md, "Negative cases"). Data are streamed in blocks, each file is
written to a temporary name and renamed, and existing files are never overwritten without
``force`` (checked for every file before anything is written).
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import os
from typing import NamedTuple

import numpy as np

from .. import ops
from ..spec.dtypes import bfloat16, dtype_name
from .atomic import atomic_open, write_text_atomic
from .format import GoldenFileError, UnknownCaseError, check_case_id
from .read import GoldenCase, GoldenFile, LazyArray

__all__ = ["FORMATS", "ExportError", "ExportedFile", "select_cases", "export_cases", "case_dir"]

FORMATS = ("bin", "npy")
EXPORT_SCHEMA = "refspec-export/1"
#: the file the harness writes with the status its kernel returned (refspec compare reads it)
STATUS_FILE = "status.json"
BLOCK_BYTES = 64 << 20


class ExportError(GoldenFileError):
    """An export that cannot be done as asked (existing files, bad directory, bad selection)."""


class ExportedFile(NamedTuple):
    role: str            # "input" or "golden"
    python_name: str
    file_name: str
    array: LazyArray


def select_cases(gf: GoldenFile, selectors=None) -> list[str]:
    """Case ids for ``--case`` values: exact ids, or shell patterns (``rope_grad/mode=half/*``);
    all cases when none are given. Unknown ids and patterns matching nothing are errors."""
    ids = gf.case_ids()
    if not selectors:
        return ids
    chosen, seen = [], set()
    for sel in selectors:
        if any(c in sel for c in "*?["):
            matched = [c for c in ids if fnmatch.fnmatchcase(c, sel)]
            if not matched:
                raise UnknownCaseError(f"no case of {gf.path} matches {sel!r}")
        elif sel in gf:
            matched = [sel]
        else:
            raise UnknownCaseError(f"case {sel!r} is not in {gf.path} ({len(ids)} cases; "
                                   f"`refspec show {gf.path}` lists them)")
        for c in matched:
            if c not in seen:
                seen.add(c)
                chosen.append(c)
    return chosen


def case_dir(out_dir, case_id: str) -> str:
    return os.path.join(os.fspath(out_dir), *check_case_id(case_id).split("/"))


def operator_of(case: GoldenCase) -> ops.Operator:
    """The record of a case's operator (ExportError if no registered operator has that name)."""
    try:
        return ops.get(case.op)
    except KeyError as exc:
        raise ExportError(f"case {case.case_id!r}: {exc.args[0]}") from None


def plan_files(case: GoldenCase, fmt: str) -> list[ExportedFile]:
    op = operator_of(case)
    files = [ExportedFile("input", n, op.input_file(n, fmt), case.inputs[n])
             for n in case.input_names]
    files += [ExportedFile("golden", n, op.golden_file(n, fmt), case.expected[n])
              for n in case.output_names]
    names = [f.file_name for f in files]
    if len(set(names)) != len(names):
        raise ExportError(f"case {case.case_id!r}: two tensors map to one file name ({names})")
    return files


def _stored_dtype(arr: LazyArray) -> np.dtype:
    dt = np.dtype(np.uint16) if arr.dtype == bfloat16 else np.dtype(arr.dtype)
    return dt.newbyteorder("<") if dt.itemsize > 1 else dt


def _npy_header(dtype: np.dtype, shape) -> bytes:
    import io
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        buf, {"descr": np.lib.format.dtype_to_descr(dtype), "fortran_order": False,
              "shape": tuple(int(s) for s in shape)})
    return buf.getvalue()


def write_array_file(path: str, arr: LazyArray, fmt: str) -> tuple[int, str]:
    """Stream one array to ``path`` (temporary name, then rename); returns (bytes, sha256)."""
    dt = _stored_dtype(arr)
    digest = hashlib.sha256()
    size = 0
    with atomic_open(path, "wb") as fh:
        if fmt == "npy":
            header = _npy_header(dt, arr.shape)
            fh.write(header)
            digest.update(header)
            size += len(header)
        for _, block in arr.blocks(BLOCK_BYTES):
            raw = np.ascontiguousarray(block)
            if raw.dtype == bfloat16:
                raw = raw.view(np.uint16)
            raw = raw.astype(dt, copy=False)
            data = memoryview(raw).cast("B")
            fh.write(data)
            digest.update(data)
            size += raw.nbytes
    return size, digest.hexdigest()


def case_description(case: GoldenCase, gf: GoldenFile, fmt: str, written: dict) -> dict:
    """The content of case.json; ``written`` maps file names to (byte size, sha256)."""
    op = operator_of(case)
    files = []
    for f in plan_files(case, fmt):
        arr = f.array
        size, sha = written[f.file_name]
        entry = {"name": f.file_name, "role": f.role, "python_name": f.python_name,
                 "aclnn_name": op.aclnn_name(f.python_name),
                 "shape": list(arr.shape), "dtype": dtype_name(arr.dtype),
                 "stored_as": "uint16 bit patterns" if arr.dtype == bfloat16 else dtype_name(arr.dtype),
                 "byte_size": size, "data_bytes": arr.nbytes, "sha256": sha}
        if f.role == "golden":
            meta = case.output_meta(f.python_name)
            entry.update(output_file=op.output_file(f.python_name, fmt),
                         comparison_class=meta["comparison_class"],
                         reduced_terms=meta["reduced_terms"], axes=meta["axes"])
        files.append(entry)
    error = None
    if case.expected_error is not None:
        error = {"code": case.expected_error, "status": case.expected_error_status,
                 "message": case.expected_error_message}
    return {
        "schema": EXPORT_SCHEMA, "case_id": case.case_id, "operator": case.op,
        "aclnn_operator": op.aclnn, "parameters": case.params,
        "seed": case.seed, "soc": case.soc or None, "distribution": case.distribution,
        "expected_error": error, "expected_code": case.expected_error or 0,
        "status_file": {"name": STATUS_FILE, "content": '{"code": N}',
                        "meaning": "the status the kernel returned: 0 when it accepted the "
                                   "input, else its aclnn code; the case passes only when N "
                                   "equals expected_code"},
        "regenerate": case.regenerate,
        "source": {"file": os.path.basename(gf.path), "sweep_name": gf.attrs.get("sweep_name"),
                   "sweep_seed": gf.attrs.get("sweep_seed"),
                   "refspec_version": gf.attrs.get("refspec_version")},
        "format": fmt, "byte_order": "little", "order": "C", "files": files,
    }


def export_cases(path, out_dir, case_ids=None, fmt: str = "bin", force: bool = False) -> list[str]:
    """Export cases of the golden file ``path`` under ``out_dir``; returns the case directories.

    ``case_ids``: ids or shell patterns (None = every case). Raises ExportError if a target file
    exists and ``force`` is False (before writing anything), UnknownCaseError for an unknown id,
    GoldenFileError for an unreadable file and OSError when the directory cannot be written.
    """
    if fmt not in FORMATS:
        raise ExportError(f"format {fmt!r} is not supported; allowed: {', '.join(FORMATS)}")
    out_dir = os.fspath(out_dir)
    if os.path.exists(out_dir) and not os.path.isdir(out_dir):
        raise ExportError("output exists and is not a directory", out_dir)
    with GoldenFile(path) as gf:
        ids = select_cases(gf, case_ids)
        plans = []
        for case_id in ids:
            case = gf[case_id]
            d = case_dir(out_dir, case_id)
            targets = [os.path.join(d, f.file_name) for f in plan_files(case, fmt)]
            targets.append(os.path.join(d, "case.json"))
            plans.append((case, d, targets))
        if not force:
            existing = [t for _, _, targets in plans for t in targets if os.path.lexists(t)]
            if existing:
                more = f" and {len(existing) - 1} more" if len(existing) > 1 else ""
                raise ExportError(f"{existing[0]} exists{more}; use --force to overwrite")
        dirs = []
        for case, d, _ in plans:
            os.makedirs(d, exist_ok=True)
            written = {}
            for f in plan_files(case, fmt):
                written[f.file_name] = write_array_file(os.path.join(d, f.file_name), f.array, fmt)
            desc = case_description(case, gf, fmt, written)
            write_text_atomic(os.path.join(d, "case.json"), json.dumps(desc, indent=2) + "\n")
            dirs.append(d)
    return dirs
