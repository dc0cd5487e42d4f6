"""A ``.npz`` or ``.npy`` file of actual outputs (docs/compare.md, "Actual outputs")."""

from __future__ import annotations

import os

import numpy as np

from ...spec.errors import one_line
from .arrays import Problem, check_array, open_npy
from .base import ActualSource, file_names

__all__ = ["NpzSource"]


class NpzSource(ActualSource):
    """A ``.npz`` (keys ``<case_id>/<output>``, bare ``<output>`` when one case is judged, or a
    mapping file's ``key`` entries) or a single ``.npy`` (its file stem is the output name)."""

    kind = "npz"

    def __init__(self, path: str, mapping=None):
        super().__init__(path)
        self.mapping = mapping
        self._npz = None
        self._error = None
        if path.lower().endswith(".npy"):
            self._keys = [os.path.splitext(os.path.basename(path))[0]]
        else:
            try:
                self._npz = np.load(path, allow_pickle=False)
                self._keys = list(self._npz.files)
            except Exception as exc:
                self._error = f"{path}: not a readable .npz file ({one_line(exc)})"
                self._keys = []

    def _candidates(self, case_id, op, output):
        keys = []
        if self.mapping is not None:
            k = self.mapping.key_for(case_id, output)
            if k is not None:
                return [k]
        for stem in file_names(output, op):
            keys.append(f"{case_id}/{stem}")
        if self.single_case == case_id:
            keys.extend(file_names(output, op))
        return keys

    def lookup(self, case_id, op, output, dtype, shape):
        if self._error:
            return Problem("unreadable", self._error, self.path)
        for k in self._candidates(case_id, op, output):
            if k in self._keys:
                src = f"{self.path}[{k}]" if self._npz is not None else self.path
                if self._npz is None:
                    return open_npy(self.path, dtype, shape, src)
                try:
                    arr = self._npz[k]
                except Exception as exc:
                    return Problem("unreadable", f"{src}: {one_line(exc)}", src)
                return check_array(arr, dtype, shape, src)
        if self._npz is None:
            stem = self._keys[0]
            return Problem("missing", f"{self.path} is one array, read as output {stem!r} (its "
                                      f"file name); output {output!r} is not in it (a directory "
                                      "or an .npz holds several outputs)")
        tried = self._candidates(case_id, op, output)
        return Problem("missing", f"no key {' or '.join(repr(t) for t in tried)} in {self.path}")

    def close(self):
        if self._npz is not None:
            self._npz.close()
