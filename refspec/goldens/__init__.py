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
"""

from __future__ import annotations

from .format import (BF16_ENCODING, COMPRESSIONS, DEFAULT_COMPRESSION, SCHEMA_VERSION,
                     GoldenFileDamagedError, GoldenFileError, GoldenFileExistsError,
                     UnknownCaseError, part_path)
from .shards import merge, pack
from .read import ArrayGroup, GoldenCase, GoldenFile, LazyArray, open
from .write import GoldenWriter

__all__ = [
    "SCHEMA_VERSION", "BF16_ENCODING", "COMPRESSIONS", "DEFAULT_COMPRESSION",
    "GoldenFileError", "GoldenFileExistsError", "GoldenFileDamagedError", "UnknownCaseError",
    "GoldenWriter", "GoldenFile", "GoldenCase", "LazyArray", "ArrayGroup",
    "open", "merge", "pack", "part_path",
]
