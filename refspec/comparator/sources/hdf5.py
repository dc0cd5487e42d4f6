"""An HDF5 file of actual outputs (docs/compare.md, "Actual outputs"): a refspec golden file
(another implementation's ``expected/``, or a golden file itself) or plain HDF5."""

from __future__ import annotations

import h5py

from ... import goldens
from ...goldens.format import BF16_ENCODING, INDEX_DATASET
from ...spec.dtypes import bfloat16
from ...spec.errors import one_line
from .arrays import H5Actual, Problem, mismatch
from .base import ActualSource, file_names

__all__ = ["H5Source"]


class H5Source(ActualSource):
    """An HDF5 file. A refspec golden file (another implementation's, or a golden file itself)
    is read through ``refspec.goldens.open``: its ``expected/`` outputs decoded as the reader
    decodes them, and the status each case was made with (0, or a negative case's expected
    code). Plain HDF5 files with ``/<case_id>/<output>`` datasets are read too."""

    kind = "hdf5"

    def __init__(self, path: str):
        super().__init__(path)
        self._file = self._golden = self._error = None
        try:
            self._file = h5py.File(path, "r")
            if "schema_version" in self._file.attrs and INDEX_DATASET in self._file:
                self._file.close()
                self._file, self._golden = None, goldens.open(path)
        except Exception as exc:
            self._error = f"{path}: cannot open as HDF5 ({one_line(exc)})"

    def _case(self, case_id):
        """The golden file's case (the last one kept: its outputs are looked up one by one)."""
        if getattr(self, "_last", (None,))[0] != case_id:
            self._last = (case_id, self._golden[case_id])
        return self._last[1]

    def status(self, case_id):
        if self._golden is None or case_id not in self._golden:
            return None, None
        try:
            return self._case(case_id).expected_error or 0, None
        except goldens.GoldenFileError as exc:     # the actual file's problem, not the golden's
            return None, str(exc)

    def lookup(self, case_id, op, output, dtype, shape):
        if self._error:
            return Problem("unreadable", self._error, self.path)
        if self._golden is not None:
            return self._golden_lookup(case_id, output, dtype, shape)
        f = self._file
        paths = []
        for stem in file_names(output, op):
            paths += [f"{case_id}/expected/{stem}", f"{case_id}/{stem}"]
            if self.single_case == case_id:
                paths.append(stem)
        for p in paths:
            try:
                obj = f.get(p)
            except Exception:
                obj = None
            if isinstance(obj, h5py.Dataset):
                src = f"{self.path}:/{p}"
                stored = obj.dtype
                declared = obj.attrs.get("dtype")
                if isinstance(declared, bytes):
                    declared = declared.decode()
                if obj.attrs.get("encoding") in (BF16_ENCODING, BF16_ENCODING.encode()) or (
                        declared == "bfloat16" and stored.itemsize == 2):
                    stored = bfloat16
                return (mismatch(src, stored, obj.shape, dtype, shape)
                        or H5Actual(src, obj, dtype))
        return Problem("missing", f"no dataset {paths[0]} in {self.path}")

    def _golden_lookup(self, case_id, output, dtype, shape):
        gf = self._golden
        if case_id not in gf:
            return Problem("missing", f"no case {case_id} in {self.path}")
        try:
            expected = self._case(case_id).expected
            if output not in expected:
                return Problem("missing", f"case {case_id} of {self.path} has no expected "
                                          f"{output}")
            arr = expected[output]
        except goldens.GoldenFileError as exc:     # the actual file's problem, not the golden's
            return Problem("unreadable", str(exc), self.path)
        src = f"{self.path}:{case_id}/expected/{output}"
        return mismatch(src, arr.dtype, arr.shape, dtype, shape) or H5Actual(src, arr, dtype)

    def close(self):
        for f in (self._file, self._golden):
            if f is not None:
                f.close()
