"""Directory trees of actual outputs (docs/compare.md, "Actual outputs"):
``<case_id>/<output>.bin|.npy``, what ``refspec export`` lays out (the kernel's files next to the
inputs; aclnn camelCase or Python snake_case names), with a ``status.json`` per case."""

from __future__ import annotations

import os

from ...goldens.case_files import STATUS_FILE, export_root
from .arrays import Problem, open_bin, open_npy
from .base import ActualSource, file_names, read_status

__all__ = ["TreeSource", "MOST_TWIN_NOTES"]

#: outputs with more than one file named one by one in the report's notes
MOST_TWIN_NOTES = 3


class TreeSource(ActualSource):
    """``ROOT/<case_id>/<output>.bin|.npy`` (the case id's '/' parts are directories)."""

    kind = "directory"

    def __init__(self, path: str):
        super().__init__(path)
        self._twins: list[tuple[str, list[str]]] = []     # (file judged, files not read)

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
        tried = [stem + ext for stem in file_names(output, op) for ext in (".bin", ".npy")]
        present = [os.path.join(d, name) for name in tried
                   if os.path.lexists(os.path.join(d, name))]
        if not present:
            return Problem("missing", f"none of {', '.join(tried)} in {d}")
        p = present[0]
        if len(present) > 1:
            self._twins.append((p, present[1:]))
        if os.path.isdir(p):
            return Problem("unreadable", f"{p}: is a directory", p)
        if p.endswith(".bin"):
            return open_bin(p, dtype, shape, p)
        return open_npy(p, dtype, shape, p)

    def notes(self) -> list[str]:
        """One line for each output (the first ``MOST_TWIN_NOTES``) that has more than one
        file: which one was judged and which were not read."""
        lines = [f"{used} judged; {', '.join(others)} also there, not read (one file per output)"
                 for used, others in self._twins[:MOST_TWIN_NOTES]]
        if len(self._twins) > MOST_TWIN_NOTES:
            lines.append(f"{len(self._twins) - MOST_TWIN_NOTES} more outputs have more than one "
                         "file: the first of <name>.bin, <name>.npy (aclnn name first) judged "
                         "each time")
        return lines

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
