"""The file layout of an exported case folder (docs/goldens.md, section 7): the names that
``refspec export`` writes, that a kernel's harness writes back and that the readers of case
folders and the comparator look for. The tensor files themselves are named by the operator's
record (``refspec.ops.record.Operator.tensor_file`` and the like)."""

from __future__ import annotations

__all__ = ["EXPORT_SCHEMA", "CASE_JSON", "STATUS_FILE"]

#: the ``schema`` of case.json
EXPORT_SCHEMA = "refspec-export/1"
#: what a case folder says about itself: its operator, parameters, profile and files
CASE_JSON = "case.json"
#: the file the harness writes with the status its kernel returned (refspec compare reads it)
STATUS_FILE = "status.json"
