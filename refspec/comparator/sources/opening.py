"""The source of actual outputs for what the caller gives (docs/compare.md, "Actual outputs"):
a directory tree, an msprobe dump, a ``.npz``/``.npy`` file, an HDF5 file, or a dict of arrays."""

from __future__ import annotations

import os

from ...inputs.msprobe_dump import is_msprobe_dir
from ...inputs.output_map import Mapping
from .base import ActualSource, CompareUsageError
from .hdf5 import H5Source
from .memory import MemorySource
from .msprobe_dumps import MsprobeSource
from .npz import NpzSource
from .trees import TreeSource

__all__ = ["open_source"]


def open_source(actual, mapping: Mapping | None = None) -> ActualSource:
    """An ActualSource for a path (directory tree, msprobe dump, .npz/.npy, HDF5) or a dict of
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
    if os.path.isdir(path):
        if is_msprobe_dir(path):
            if mapping is None:
                raise CompareUsageError(f"{path} is an msprobe dump: give a mapping file (--map) "
                                        "saying which dump tensor is which golden output")
            return MsprobeSource(path, mapping)
        return TreeSource(path)
    low = path.lower()
    if low.endswith((".npz", ".npy")):
        return NpzSource(path, mapping)
    import h5py
    if low.endswith((".h5", ".hdf5", ".hdf")) or h5py.is_hdf5(path):
        return H5Source(path)
    raise CompareUsageError(f"{path}: not a directory, .npz, .npy or HDF5 file; allowed actual "
                            "outputs: an export directory or <case_id>/<output>.bin|.npy tree, "
                            ".npz/.npy, HDF5, an msprobe dump directory")
