"""Export golden cases to the vendor test scripts' file layout (docs/goldens.md §7).

``DIR/<case_id>/`` (the case id's '/' parts as nested directories) gets one file per input named
after its aclnn parameter (``dy.bin``, ``gradQueryOutput.bin``), ``golden_<output>.bin`` per
expected output and ``case.json`` describing every file. ``.bin`` is ``ndarray.tofile``: raw,
little-endian, C order, bfloat16 as its 16-bit patterns; ``.npy`` is NumPy's format (what
``np.save`` writes), bfloat16 saved as uint16 bits. ``case.json`` also says what the kernel's
harness writes back: ``<output>.bin`` per output, and ``status.json`` with the status the
kernel returned, ``{"code": 0}`` when it accepted the input or ``{"code": 561002}`` (its aclnn
code) when it rejected it; ``expected_code`` is the code the case expects (0 for a positive
case), which ``refspec compare`` checks (docs/compare.md, "Negative cases"). An output updated in place (a
KV cache) has ``"in_place": true``: its output file is the input file of the same name, which the
kernel updates, and its golden is the whole cache after the call. A dataset stored
raw (the default, no compression) is copied from its byte ranges in the golden file with large
sequential reads; others are read through h5py in blocks. Each file is written to a temporary
name and renamed, and existing files are never overwritten without ``force`` (checked for
every file before anything is written). The cases' metadata come from the golden file's index,
so no HDF5 attribute is read per case.

Nothing is trusted blindly: every array is checked against its description and checksum as it
is read (``refspec.goldens.datasets``), so a file whose index and data disagree, whose bytes
are damaged or lie outside it is refused naming the case and the dataset; an incomplete file
is refused unless opened with ``allow_incomplete``. Every case folder must lie inside the
output folder once symbolic links are resolved (``refspec.goldens.format.inside``). With
``force``, each case folder is first emptied of what an earlier export and a kernel's run left
there (the files of either format, the kernel's outputs, ``status.json``, temporaries), so
nothing is judged later against the new goldens by mistake.
"""

from __future__ import annotations

import itertools
import json
import os
import sys
from typing import NamedTuple

import numpy as np

from .. import ops
from ..spec.dtypes import bfloat16, dtype_name
from . import executors
from .atomic import temporaries, write_chunks_atomic
from .format import GoldenFileError, OutsideError, check_case_id, inside
from .read import GoldenCase, GoldenFile, LazyArray
from .selection import select_ids
from .format import stored_dtype
from .case_files import CASE_JSON, EXPORT_SCHEMA, STATUS_FILE

__all__ = ["FORMATS", "ExportError", "ExportedFile", "export_cases", "case_dir"]

FORMATS = ("bin", "npy")
BLOCK_BYTES = 64 << 20


class ExportError(GoldenFileError):
    """An export that cannot be done as asked (existing files, bad directory, bad selection)."""


class ExportedFile(NamedTuple):
    role: str            # "input" or "golden"
    python_name: str
    file_name: str
    array: LazyArray


def case_dir(out_dir, case_id: str) -> str:
    return os.path.join(os.fspath(out_dir), *check_case_id(case_id).split("/"))


def checked_case_dir(out_dir: str, case_id: str) -> str:
    """``case_dir``, refused (``ExportError``) when a symbolic link inside ``out_dir`` would
    take it elsewhere."""
    d = case_dir(out_dir, case_id)
    try:
        inside(out_dir, os.path.relpath(d, out_dir))
    except OutsideError as exc:
        raise ExportError(f"case {case_id!r}: its folder {exc}; refused") from None
    return d


def operator_of(case: GoldenCase) -> ops.Operator:
    """The record of a case's operator (ExportError if no registered operator has that name)."""
    try:
        return ops.get(case.op)
    except KeyError as exc:
        raise ExportError(f"case {case.case_id!r}: {exc.args[0]}") from None


def plan_files(case: GoldenCase, fmt: str) -> list[ExportedFile]:
    op = operator_of(case)
    files = [ExportedFile("input", n, op.tensor_file(n, fmt), case.inputs[n])
             for n in case.input_names]
    files += [ExportedFile("golden", n, op.golden_file(n, fmt), case.expected[n])
              for n in case.output_names]
    names = [f.file_name for f in files]
    if len(set(names)) != len(names):
        raise ExportError(f"case {case.case_id!r}: two tensors map to one file name ({names})")
    return files


def _npy_header(dtype: np.dtype, shape) -> bytes:
    import io
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        buf, {"descr": np.lib.format.dtype_to_descr(dtype), "fortran_order": False,
              "shape": tuple(int(s) for s in shape)})
    return buf.getvalue()


def _stored_blocks(arr: LazyArray, files: dict):
    """The array's bytes as exported (little-endian, C order, bfloat16 as uint16 bits): its raw
    byte ranges in the golden file read directly (``files`` caches one descriptor per file),
    else blocks read through h5py."""
    extents = arr.raw_extents() if arr.size else None
    if extents is not None and sys.byteorder == "little":
        path = arr.file_path
        if path not in files:
            files[path] = os.open(path, os.O_RDONLY)
        itemsize = arr.dtype.itemsize
        for _, count, offset in extents:
            for at in range(0, count * itemsize, BLOCK_BYTES):
                n = min(BLOCK_BYTES, count * itemsize - at)
                data = os.pread(files[path], n, offset + at)
                if len(data) != n:
                    raise arr.corrupt("the file ends before its last bytes (truncated)")
                yield data
        return
    dt = stored_dtype(arr.dtype)
    for _, block in arr.blocks(BLOCK_BYTES):
        raw = np.ascontiguousarray(block)
        if raw.dtype == bfloat16:
            raw = raw.view(np.uint16)
        yield raw.astype(dt, copy=False)


def write_array_file(path: str, arr: LazyArray, fmt: str, files: dict | None = None) -> tuple[int, str]:
    """Write one array to ``path`` (temporary name, then rename); returns (bytes, sha256)."""
    header = [_npy_header(stored_dtype(arr.dtype), arr.shape)] if fmt == "npy" else []
    return write_chunks_atomic(path, itertools.chain(header, _stored_blocks(arr, files)))


def case_description(case: GoldenCase, gf: GoldenFile, fmt: str, written: dict,
                     planned: list[ExportedFile]) -> dict:
    """The content of case.json; ``planned`` is ``plan_files`` of the case, ``written`` maps
    their file names to (byte size, sha256)."""
    op = operator_of(case)
    files = []
    for f in planned:
        arr = f.array
        size, sha = written[f.file_name]
        entry = {"name": f.file_name, "role": f.role, "python_name": f.python_name,
                 "aclnn_name": op.aclnn_name(f.python_name),
                 "shape": list(arr.shape), "dtype": dtype_name(arr.dtype),
                 "stored_as": "uint16 bit patterns" if arr.dtype == bfloat16 else dtype_name(arr.dtype),
                 "byte_size": size, "data_bytes": arr.nbytes, "sha256": sha}
        if f.role == "golden":
            meta = case.output_meta(f.python_name)
            entry.update(output_file=op.tensor_file(f.python_name, fmt),
                         comparison_class=meta["comparison_class"],
                         reduced_terms=meta["reduced_terms"], axes=meta["axes"])
            if f.python_name in op.in_place:        # the kernel updates the input file
                entry.update(in_place=True, written_class=case.expected[f.python_name]
                             .attrs.get("written_class"))
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


def case_json(desc: dict) -> str:
    """case.json's text: one top-level key per line and one line per file (the json module's C
    encoder writes each line; the pure-Python indenting encoder would cost more than the
    data)."""
    lines = []
    for key, value in desc.items():
        if key == "files":
            entries = ",\n".join("    " + json.dumps(f) for f in value)
            lines.append(f'  "files": [\n{entries}\n  ]' if value else '  "files": []')
        else:
            lines.append(f"  {json.dumps(key)}: {json.dumps(value)}")
    return "{\n" + ",\n".join(lines) + "\n}\n"


#: the work of exporting a file beyond its bytes, in bytes (creating, naming, hashing)
FILE_COST = 1 << 17


def export_cases(path, out_dir, case_ids=None, fmt: str = "bin", force: bool = False,
                 jobs: int = 1, scheduler: str | None = None, socs=None) -> list[str]:
    """Export cases of the golden file ``path`` under ``out_dir``; returns the case directories.

    ``path``: a golden file's path, or an open ``GoldenFile`` (opened with
    ``allow_incomplete=True`` to export the cases an incomplete file holds). ``case_ids``: ids
    or shell patterns (None = every case); ``socs``: only the cases of these chip profiles
    (None: every one; ``refspec.goldens.selection.profiles``). ``jobs`` worker processes (or
    the Dask cluster at ``scheduler``) export groups of cases of about equal size side by
    side, each reading the golden file itself. Raises ExportError if a file of a case folder
    exists and ``force`` is False (before writing anything) or a case folder would lie outside
    ``out_dir``, UnknownCaseError for an unknown id, GoldenFileError for an unreadable or
    incomplete file (CorruptGoldenError for damaged data) and OSError when a file cannot be
    written (naming it).
    """
    if fmt not in FORMATS:
        raise ExportError(f"format {fmt!r} is not supported; allowed: {', '.join(FORMATS)}")
    out_dir = os.path.abspath(os.fspath(out_dir))
    if os.path.exists(out_dir) and not os.path.isdir(out_dir):
        raise ExportError("output exists and is not a directory", out_dir)
    source = (path.path, path.allow_incomplete) if isinstance(path, GoldenFile) else (
        os.fspath(path), False)
    with GoldenFile(*source) as gf:
        ids = select_ids(gf, case_ids, socs=socs)
        for case_id in ids:
            checked_case_dir(out_dir, case_id)
        if not force and os.path.isdir(out_dir):      # nothing is written if anything exists
            existing = [t for case_id in ids for t in _known_files(gf[case_id], out_dir)
                        if os.path.lexists(t)]
            if existing:
                more = f" and {len(existing) - 1} more" if len(existing) > 1 else ""
                raise ExportError(f"{existing[0]} exists{more}; use --force to replace them "
                                  "(it also removes the kernel outputs and status.json an "
                                  "earlier run left in the case folders)")
        rows = {r.case_id: r for r in gf.summary()}
    weights = [rows[c].data_bytes + FILE_COST * 12 for c in ids]
    groups = executors.balance(weights, 4 * jobs if jobs > 1 or scheduler else 1)
    tasks = [(source, out_dir, [ids[i] for i in g], fmt, force) for g in groups]
    for _ in executors.run(_export_group, tasks, jobs=jobs, scheduler=scheduler):
        pass
    return [case_dir(out_dir, c) for c in ids]


def _export_group(task) -> int:
    """Export the cases ``ids`` of one golden file (a task: runs in a worker process too; it
    stops between cases when the process that started it has ended)."""
    source, out_dir, ids, fmt, force = task
    files = {}
    with GoldenFile(*source) as gf:
        try:
            for case_id in ids:
                if executors.parent_gone():
                    break
                case = gf[case_id]
                d = checked_case_dir(out_dir, case_id)
                if force:
                    _clear(case, out_dir)
                os.makedirs(d, exist_ok=True)
                planned = plan_files(case, fmt)
                written = {f.file_name: write_array_file(os.path.join(d, f.file_name), f.array,
                                                         fmt, files) for f in planned}
                desc = case_description(case, gf, fmt, written, planned)
                write_chunks_atomic(os.path.join(d, CASE_JSON), [case_json(desc).encode("utf-8")])
        finally:
            for fd in files.values():
                os.close(fd)
    return len(ids)


def _known_files(case: GoldenCase, out_dir: str) -> list[str]:
    """Every file of a case folder that an export (in either format) or a kernel's harness
    writes: inputs, goldens, the kernel's outputs, case.json, status.json."""
    d = case_dir(out_dir, case.case_id)
    op = operator_of(case)
    names = [CASE_JSON, STATUS_FILE]
    for fmt in FORMATS:
        names += [f.file_name for f in plan_files(case, fmt)]
        names += [op.tensor_file(n, fmt) for n in case.output_names]
    return [os.path.join(d, n) for n in dict.fromkeys(names)]


def _clear(case: GoldenCase, out_dir: str) -> None:
    """Remove what an earlier export or run left in a case folder (``_known_files`` and
    their temporaries)."""
    for path in _known_files(case, out_dir):
        for found in [path] + temporaries(path):
            if os.path.lexists(found):
                os.remove(found)
