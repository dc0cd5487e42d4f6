"""Merging shard files of one sweep (``refspec generate --shard K/N``) into one golden file.

Case groups are copied with HDF5's object copy (``h5py.Group.copy``): datasets keep their bytes,
chunking, filters and attributes; nothing is decoded and re-encoded. ``/index`` lists the cases
shard by shard, each shard in its own order. The output is written like the writer's: to
``<out>.part``, renamed when complete.
"""

from __future__ import annotations

import json
import os
from datetime import datetime, timezone


from .format import (CASES_GROUP, GoldenFileError, GoldenFileExistsError, atomic_replace,
                     case_path, part_path)
from .read import GoldenFile
from .write import SWEEP_ATTRS, append_index, create_golden_file, require_case_parent

__all__ = ["merge"]

#: root attributes every shard must share (besides the sweep identity)
_SAME = ("schema_version", "refspec_version", *SWEEP_ATTRS)


def merge(out_path, shard_paths, force: bool = False) -> str:
    """Join complete shard files of the same sweep into ``out_path``; returns ``out_path``.

    Raises GoldenFileError when a shard is unreadable or incomplete, when shards differ in
    sweep name, definition, seed, schema or refspec version, when a case id occurs twice, or when
    ``out_path`` exists and ``force`` is False.
    """
    out_path = os.fspath(out_path)
    shard_paths = [os.fspath(p) for p in shard_paths]
    if not shard_paths:
        raise GoldenFileError("nothing to merge: no shard files given", out_path)
    same = [p for p in shard_paths if os.path.exists(p) and os.path.exists(out_path)
            and os.path.samefile(p, out_path)]
    if same:
        raise GoldenFileError("the output is also one of the shards", out_path)
    if os.path.exists(out_path) and not force:
        raise GoldenFileExistsError("output exists; use --force to replace it", out_path)
    directory = os.path.dirname(os.path.abspath(out_path))
    if not os.path.isdir(directory):
        raise GoldenFileError(f"cannot write: directory {directory} does not exist", out_path)

    shards = []
    try:
        for p in shard_paths:
            shards.append(GoldenFile(p))
        _check_shards(shards)
        first = shards[0].attrs
        root = {k: v for k, v in first.items() if k != "complete"
                and all(s.attrs.get(k) == v for s in shards[1:])}
        root["created"] = datetime.now(timezone.utc).replace(microsecond=0).isoformat() \
            .replace("+00:00", "Z")
        root["merged_from"] = json.dumps([os.path.basename(s.path) for s in shards])
        tmp = part_path(out_path)
        f = create_golden_file(tmp, root)
        try:
            for s in shards:
                src = s.h5
                for case_id in s.case_ids():
                    parent = require_case_parent(f, case_id)
                    src.copy(src[case_path(case_id)], parent, name=case_id.rsplit("/", 1)[-1])
                    append_index(f, case_id)
            f.attrs["complete"] = True
            f.flush()
        except BaseException:
            f.close()
            if os.path.exists(tmp):
                os.remove(tmp)
            raise
        f.close()
        atomic_replace(tmp, out_path)
    finally:
        for s in shards:
            s.close()
    return out_path


def _check_shards(shards: list[GoldenFile]) -> None:
    first = shards[0]
    seen: dict[str, str] = {}
    for s in shards:
        if not s.complete:
            raise GoldenFileError("shard is incomplete (an interrupted run?); resume it first",
                                  s.path)
        for key in _SAME:
            if s.attrs.get(key) != first.attrs.get(key):
                raise GoldenFileError(f"shard is not of the same sweep as {first.path}: {key} "
                                      f"differs ({str(s.attrs.get(key))!r:.60} vs "
                                      f"{str(first.attrs.get(key))!r:.60})", s.path)
        for case_id in s.case_ids():
            if case_id in seen:
                raise GoldenFileError(f"duplicate case id {case_id!r}: also in {seen[case_id]}",
                                      s.path)
            seen[case_id] = s.path
        if CASES_GROUP not in s.h5:
            raise GoldenFileError("not a refspec golden file (no /cases)", s.path)
