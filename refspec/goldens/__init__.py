"""The goldens layer: sweeps, case building, generation, the HDF5 store, export, manifest
(docs/architecture.md). This module is the store's API: golden HDF5 files, schema v1
(docs/goldens.md); the rest is in its modules (``refspec.goldens.sweep``,
``refspec.goldens.cases``, ``refspec.goldens.engine``,
``refspec.goldens.export``, ``refspec.goldens.manifest``).

Reading::

    import refspec.goldens as goldens
    with goldens.open("smoke.h5") as gf:
        for case in gf:
            dy = case.inputs["dy"][:]                 # np.ndarray in its real dtype
            meta = case.output_meta("dcos")           # comparison class, K, axes, dtype

Writing (the generator)::

    with goldens.GoldenWriter("out.h5", sweep_name="smoke", sweep_definition=toml_text,
                              sweep_seed=0) as w:
        if not w.has_case(case_id):
            w.write_case(case_id, op=..., params=..., seed=..., soc=..., distribution=...,
                         inputs=..., expected=..., exact=..., terms=..., axes=...,
                         regenerate=...)

Merging shards: ``goldens.merge("all.h5", ["shard1.h5", "shard2.h5"])``; one self-contained
copy of a ``--jobs`` run's file: ``goldens.pack("run.h5", "self.h5")``.

Every problem of a golden file is a ``GoldenFileError`` (an ``OSError`` whose ``str()`` is one
line naming the file): ``CorruptGoldenError`` (a damaged or contradictory file: ``case_id``
and ``dataset`` say where), ``IncompleteGoldenError`` (not marked complete, opened without
``allow_incomplete=True``), ``GoldenFileLockedError``, ``GoldenFileExistsError``.
``verify_output(case, name)`` checks an expected output against its exact value,
``verify_case(case)`` every dataset of a case.
"""

from __future__ import annotations

from .format import (BF16_ENCODING, COMPRESSIONS, DEFAULT_COMPRESSION, SCHEMA_VERSION,
                     CorruptGoldenError, GoldenFileDamagedError, GoldenFileError,
                     GoldenFileExistsError, GoldenFileLockedError, IncompleteGoldenError,
                     UnknownCaseError, part_path)
from .integrity import rounding_mismatch, verify_case, verify_output
from .shards import merge, pack
from .read import ArrayGroup, GoldenCase, GoldenFile, LazyArray, open
from .write import GoldenWriter

__all__ = [
    "SCHEMA_VERSION", "BF16_ENCODING", "COMPRESSIONS", "DEFAULT_COMPRESSION",
    "GoldenFileError", "GoldenFileExistsError", "GoldenFileDamagedError", "CorruptGoldenError",
    "IncompleteGoldenError", "GoldenFileLockedError", "UnknownCaseError",
    "GoldenWriter", "GoldenFile", "GoldenCase", "LazyArray", "ArrayGroup",
    "open", "merge", "pack", "part_path", "verify_case", "verify_output", "rounding_mismatch",
]
