"""msprobe dump directories as a source of actual outputs (docs/real_runs.md).

The dump is read by ``refspec.inputs.msprobe_dump`` (the one reader of dump.json and its tensor
files). A mapping (``refspec.inputs.output_map``) says which dump tensor is which golden
output: a mapping file, or ``golden_mapping`` for a golden file built from the dump itself
(``refspec golden --msprobe``), whose cases name their dump records.
"""

from __future__ import annotations

import os

from ... import goldens
from ...inputs.msprobe_dump import (Dump, DumpError, find_dumps, folder_names, is_msprobe_dir,
                                   step_rank)
from ...inputs.output_map import Mapping, load_mapping
from ...inputs.tensor_files import TensorFile
from ...spec.dtypes import dtype_name
from .arrays import ArrayActual, Problem, RawFileActual
from .base import ActualSource, CompareUsageError

__all__ = ["MsprobeSource", "golden_mapping", "msprobe_source", "find_dumps", "is_msprobe_dir"]


def golden_mapping(golden) -> Mapping:
    """The mapping of a golden file whose cases came from an msprobe dump: each output of each
    such case to the dump tensor it names (its ``dump`` parameter). A file with no such case
    gives a mapping with no entries (every output is then missing)."""
    from ...inputs.msprobe_calls import dump_entries
    entries = []
    with goldens.open(golden) as gf:
        for case in gf:
            entries += dump_entries(case.case_id, case.params)
    return Mapping(entries, path=f"{os.fspath(golden)} (its msprobe cases)")


def msprobe_source(golden, dump_path, actual=None, mapping=None) -> "MsprobeSource":
    """The actual outputs of ``refspec compare GOLDEN --msprobe DUMP_PATH``: the dump, with the
    mapping file given or else the golden cases' own dump records (``golden_mapping``)."""
    if actual is not None:
        raise CompareUsageError(f"give the actual outputs once: ACTUAL {actual} or --msprobe "
                                f"{dump_path}, not both")
    if not is_msprobe_dir(dump_path):
        raise CompareUsageError(f"--msprobe {dump_path}: not an msprobe dump (no dump.json in it "
                                "or in its step*/rank*/ folders)")
    if mapping is None:
        mapping = golden_mapping(golden)
        if not mapping.entries:
            raise CompareUsageError(f"{golden}: no case names an msprobe dump record (it was not "
                                    f"made by `refspec golden --msprobe`); give --map MAP.toml")
    elif not isinstance(mapping, Mapping):
        mapping = load_mapping(mapping)
    return MsprobeSource(os.fspath(dump_path), mapping)


def _same(number: int | None, given) -> bool:
    """A step or rank read from a dump's folders equals the one a mapping gives."""
    try:
        return number is not None and number == int(given)
    except (TypeError, ValueError):
        return False


class MsprobeSource(ActualSource):
    kind = "msprobe"

    def __init__(self, path: str, mapping):
        super().__init__(path)
        self.mapping = mapping
        self.dumps = find_dumps(path)
        #: each dump's step and rank (a proc folder numbered as msprobe numbers it), read once
        self.numbers = {d: step_rank(d) for d in self.dumps}
        self._cache: dict[str, Dump | str] = {}

    def _choose_dump(self, entry: dict):
        step = entry.get("step", self.mapping.step)
        rank = entry.get("rank", self.mapping.rank)
        cands = [d for d in self.dumps
                 if (step is None or _same(self.numbers[d][0], step))
                 and (rank is None or _same(self.numbers[d][1], rank))]
        if len(cands) == 1:
            return cands[0], None
        labels = ", ".join(self._described(d) for d in self.dumps) or "none"
        if not cands:
            return None, f"no dump for step={step} rank={rank} under {self.path} (found: {labels})"
        return None, (f"several dumps under {self.path} ({labels}); say which with step = N and "
                      "rank = R in the mapping file")

    def _described(self, dump_json: str) -> str:
        folder = os.path.relpath(os.path.dirname(dump_json), self.path).replace(os.sep, "/")
        return folder_names(folder, self.numbers[dump_json][1])[1]

    def _dump(self, dump_json: str):
        if dump_json not in self._cache:
            try:
                self._cache[dump_json] = Dump(dump_json, self.path)
            except DumpError as exc:
                self._cache[dump_json] = str(exc)
        return self._cache[dump_json]

    @staticmethod
    def _tensor(dump: Dump, entry: dict):
        if "data_name" in entry:
            return dump.by_data_name(str(entry["data_name"]))
        return dump.tensor(str(entry["api"]), str(entry.get("field", "output")),
                           int(entry.get("index", 0)))

    def lookup(self, case_id, op, output, dtype, shape):
        entry = self.mapping.entry(case_id, output) if self.mapping else None
        if entry is None or "key" in entry:
            return Problem("missing", "the mapping file names no dump tensor for this output")
        dump_json, why = self._choose_dump(entry)
        if why:
            return Problem("missing", why)
        dump = self._dump(dump_json)
        if isinstance(dump, str):
            return Problem("unreadable", dump, dump_json)
        try:
            tensor = self._tensor(dump, entry)
        except DumpError as exc:
            return Problem(exc.kind, str(exc))
        src = tensor.path or dump_json
        if tensor.dtype is not None and tensor.dtype != dtype:
            return Problem("dtype_mismatch", f"{tensor.label}: dump.json says "
                           f"{dtype_name(tensor.dtype)} but the golden output is "
                           f"{dtype_name(dtype)}", src)
        if tensor.shape is not None and tensor.shape != tuple(shape):
            return Problem("shape_mismatch", f"{tensor.label}: dump.json says shape "
                           f"{tensor.shape} but the golden output has shape {tuple(shape)}", src)
        try:
            found = tensor.locate()
        except DumpError as exc:
            return Problem(exc.kind, str(exc), src)
        if isinstance(found, TensorFile):
            return RawFileActual(src, found.path, found.offset, found.stored, found.shape,
                                 found.dtype)
        return ArrayActual(src, found, found.dtype)
