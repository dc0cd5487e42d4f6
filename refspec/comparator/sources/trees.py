"""Directory trees of actual outputs (docs/compare.md, "Actual outputs"):
``<case_id>/<output>.bin|.npy``, what ``refspec export`` lays out (the kernel's files next to the
inputs; aclnn camelCase or Python snake_case names), with a ``status.json`` per case."""

from __future__ import annotations

import os

from ...goldens.case_files import STATUS_FILE, export_root
from .arrays import Problem, open_bin, open_npy
from .base import ActualSource, file_names, read_status

__all__ = ["TreeSource"]


class TreeSource(ActualSource):
    """``ROOT/<case_id>/<output>.bin|.npy`` (the case id's '/' parts are directories)."""

    kind = "directory"

    def status(self, case_id):
        return read_status(self.status_file(case_id))

    def status_file(self, case_id):
        d = os.path.join(self.path, *case_id.split("/"))
        if not os.path.isdir(d) and self.single_case == case_id:
            d = self.path
        return os.path.join(d, STATUS_FILE)

    def lookup(self, case_id, op, output, dtype, shape):
        d = os.path.join(self.path, *case_id.split("/"))
        if not os.path.isdir(d):
            if self.single_case == case_id and self._has_files(self.path, output, op):
                d = self.path
            else:
                return Problem("missing", f"no directory {d} for this case")
        tried = []
        for stem in file_names(output, op):
            for ext in (".bin", ".npy"):
                p = os.path.join(d, stem + ext)
                tried.append(stem + ext)
                if os.path.lexists(p):
                    src = p
                    if os.path.isdir(p):
                        return Problem("unreadable", f"{p}: is a directory", src)
                    if ext == ".bin":
                        return open_bin(p, dtype, shape, src)
                    return open_npy(p, dtype, shape, src)
        return Problem("missing", f"none of {', '.join(tried)} in {d}")

    def not_run_reason(self, case_id: str) -> str:
        """Where the case folders are when ACTUAL holds none of them: a folder below it (a
        parent of the export was given) or above it (a folder inside the export)."""
        parts = case_id.split("/")
        if os.path.isdir(os.path.join(self.path, *parts)):
            return ""
        root = getattr(self, "_root", None)           # searched once unless it moves
        if root is None or (root and not os.path.isdir(os.path.join(root, *parts))):
            root = self._root = export_root(self.path, case_id)
        if not root:
            return ""
        return (f"{self.path} holds no case folders; they are under {root} (compare against "
                "that folder)")

    @staticmethod
    def _has_files(d, output, op):
        return any(os.path.exists(os.path.join(d, s + e)) for s in file_names(output, op)
                   for e in (".bin", ".npy"))
