"""Python arrays as a source of actual outputs (docs/compare.md, "Python")."""

from __future__ import annotations

from .arrays import Problem, check_array
from .base import ActualSource, file_names

__all__ = ["MemorySource"]


class MemorySource(ActualSource):
    """Python arrays: ``{case_id: {output: array}}`` or, for one case, ``{output: array}``."""

    kind = "arrays"

    def __init__(self, arrays: dict, label: str = "<arrays>"):
        super().__init__(label)
        self.arrays = arrays

    def lookup(self, case_id, op, output, dtype, shape):
        table = self.arrays.get(case_id)
        if not isinstance(table, dict):
            table = self.arrays if self.single_case == case_id else None
        if table is None:
            return Problem("missing", f"no arrays for case {case_id}")
        for stem in file_names(output, op):
            if stem in table:
                if table[stem] is None:
                    return Problem("missing", f"{stem} is None")
                return check_array(table[stem], dtype, shape, f"{self.path}[{stem}]")
        return Problem("missing", f"no array named {output} (have: {', '.join(map(str, table)) or 'none'})")
