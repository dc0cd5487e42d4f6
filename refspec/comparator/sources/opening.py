"""The source of actual outputs for what the caller gives (docs/compare.md, "Actual outputs"):
an ``ActualSource`` as it is, a description of one (``refspec run``'s ``Implementation``), a
dict of arrays, or a path, which the readers of ``READERS`` are asked about in turn.

A new layout of actual outputs (a kernel harness's own dump layout) is a subclass of
``base.ActualSource`` and one ``SourceReader`` inserted into ``READERS`` before the readers it
must come before (a directory that is no msprobe dump is otherwise a ``trees.TreeSource``)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Callable

from ...inputs.msprobe_dump import is_msprobe_dir
from ...inputs.output_map import Mapping
from .base import ActualSource, CompareUsageError
from .hdf5 import H5Source
from .memory import MemorySource
from .msprobe_dumps import MsprobeSource
from .npz import NpzSource
from .trees import TreeSource

__all__ = ["SourceReader", "READERS", "open_source"]


@dataclass(frozen=True)
class SourceReader:
    """A layout of actual outputs on disk: its ``name``, whether it reads a path
    (``accepts(path)``, the path existing) and the source it opens there (``open(path,
    mapping)``; ``mapping``: a ``refspec.inputs.output_map.Mapping`` or None)."""

    name: str
    accepts: Callable[[str], bool]
    open: Callable[[str, Mapping | None], ActualSource]


def _msprobe(path: str, mapping: Mapping | None) -> MsprobeSource:
    if mapping is None:
        raise CompareUsageError(f"{path} is an msprobe dump: give a mapping file (--map) saying "
                                "which dump tensor is which golden output")
    return MsprobeSource(path, mapping)


def _is_hdf5(path: str) -> bool:
    import h5py
    return path.lower().endswith((".h5", ".hdf5", ".hdf")) or h5py.is_hdf5(path)


#: the readers of paths, asked in this order
READERS = [
    SourceReader("msprobe dump", lambda p: os.path.isdir(p) and is_msprobe_dir(p), _msprobe),
    SourceReader("directory tree", os.path.isdir, lambda p, m: TreeSource(p)),
    SourceReader("npz", lambda p: p.lower().endswith((".npz", ".npy")), NpzSource),
    SourceReader("hdf5", _is_hdf5, lambda p, m: H5Source(p)),
]


def open_source(actual, mapping: Mapping | None = None) -> ActualSource:
    """An ActualSource for a path (the first of ``READERS`` that accepts it) or a dict of
    arrays."""
    if isinstance(actual, ActualSource):
        return actual
    if callable(getattr(actual, "open", None)) and not isinstance(actual, (str, os.PathLike)):
        return actual.open()              # a description of a source (refspec run's Implementation)
    if isinstance(actual, dict):
        return MemorySource(actual)
    path = os.fspath(actual)
    if not os.path.exists(path):
        raise CompareUsageError(f"{path}: no such file or directory (the actual outputs)")
    for reader in READERS:
        if reader.accepts(path):
            return reader.open(path, mapping)
    raise CompareUsageError(f"{path}: not a directory, .npz, .npy or HDF5 file; allowed actual "
                            "outputs: an export directory or <case_id>/<output>.bin|.npy tree, "
                            ".npz/.npy, HDF5, an msprobe dump directory")
