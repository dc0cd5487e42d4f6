"""The file names of an exported case folder (docs/goldens.md, section 7): the names that
``refspec export`` writes, that a kernel's harness writes back and that the readers of case
folders and the comparator look for. The tensor files themselves are named by the operator's
record (``refspec.ops.record.Operator.tensor_file`` and the like)."""

from __future__ import annotations

import os

__all__ = ["EXPORT_SCHEMA", "CASE_JSON", "STATUS_FILE", "export_root"]

#: the ``schema`` of case.json
EXPORT_SCHEMA = "refspec-export/1"
#: what a case folder says about itself: its operator, parameters, profile and files
CASE_JSON = "case.json"
#: the file the harness writes with the status its kernel returned (refspec compare reads it)
STATUS_FILE = "status.json"


#: folders of one level that ``export_root`` looks into at most
_SEARCHED = 1000


def export_root(path, case_id: str, depth: int = 3) -> str:
    """The folder within ``depth`` levels above or below ``path`` that holds the folder of
    ``case_id`` (its '/' parts nested), as an export lays it out; "" when none does: where
    the cases are when ``path`` was a parent of the export or a folder inside it."""
    parts = case_id.split("/")
    up = os.path.abspath(path)
    for _ in range(depth):
        up = os.path.dirname(up)
        if os.path.isdir(os.path.join(up, *parts)):
            return up
    level = [os.path.abspath(path)]
    for _ in range(depth):
        level = [sub for d in level[:_SEARCHED] for sub in _subdirs(d)]
        found = next((d for d in level if os.path.isdir(os.path.join(d, *parts))), "")
        if found:
            return found
    return ""


def _subdirs(path: str) -> list:
    try:
        with os.scandir(path) as entries:
            return sorted(e.path for e in entries if e.is_dir())
    except OSError:
        return []
