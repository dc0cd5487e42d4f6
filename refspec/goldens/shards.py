"""Golden files made of several files (docs/goldens.md, "Shards, parts and packing").

- ``merge`` joins the shard files of a job array (``refspec generate --shard K/N``) into
  one file, after checking that they form one complete, consistent set: the same sweep, seed,
  tier and selection, every shard 1..N present and complete, no case twice. ``allow_partial``
  merges what there is into a file that says it is partial and never that it is complete.
- ``write_index`` writes the index file of a ``--jobs`` run: the sweep's attributes, the
  case index and summary in sweep order, and each case as an HDF5 external link into the part
  file that holds it (``<out>.parts/``); nothing is copied.
- ``pack`` copies any golden file, following those links, into one self-contained file.

Case groups are copied with HDF5's object copy (``h5py.Group.copy``): datasets keep their bytes,
chunking, filters and attributes; nothing is decoded and re-encoded. Every output is written to
``<out>.part`` and renamed when complete.
"""

from __future__ import annotations

import json
import os
from contextlib import ExitStack

import h5py

from . import index
from .atomic import OutputLock, ensure_space
from .format import GoldenFileError, GoldenFileExistsError, atomic_replace, case_path, part_path
from .read import GoldenFile
from .h5_objects import CaseGroups, copy_cases
from .write import SWEEP_ATTRS, create_golden_file, utc_now

__all__ = ["merge", "pack", "write_index", "shard_label"]

#: root attributes every shard must share (besides the sweep identity)
_SAME = ("schema_version", "refspec_version", *SWEEP_ATTRS, "tier")
#: root attributes that describe one file of a set, not the joined file
_OWN = ("complete", "created", "shard", "part", "parts", "merged_from", "partial")


def shard_label(gf: GoldenFile) -> tuple[int, int] | None:
    """(K, N) of a file written with ``--shard K/N``, else None."""
    label = gf.attrs.get("shard")
    if not label:
        return None
    k, n = str(label).split("/")
    return int(k), int(n)


def _check_output(out_path: str, sources: list[str], force: bool, what: str = "shards") -> None:
    if not sources:
        raise GoldenFileError(f"nothing to merge: no {what} given", out_path)
    if any(os.path.exists(out_path) and os.path.exists(p) and os.path.samefile(p, out_path)
           for p in sources):
        raise GoldenFileError(f"the output is also one of the {what}", out_path)
    if os.path.exists(out_path) and not force:
        raise GoldenFileExistsError("output exists; use --force to replace it", out_path)
    directory = os.path.dirname(os.path.abspath(out_path))
    if not os.path.isdir(directory):
        raise GoldenFileError(f"cannot write: directory {directory} does not exist", out_path)


def _check_shards(shards: list[GoldenFile], allow_partial: bool) -> list[str]:
    """Refuse a set of shards that is inconsistent, or incomplete unless ``allow_partial``;
    returns what is incomplete about it ("missing shard 2/4", ...)."""
    first = shards[0]
    for s in shards[1:]:
        for key in _SAME:
            if s.attrs.get(key) != first.attrs.get(key):
                raise GoldenFileError(f"shard is not of the same sweep as {first.path}: {key} differs "
                                      f"({str(s.attrs.get(key))!r:.60} vs "
                                      f"{str(first.attrs.get(key))!r:.60})", s.path)
    labels = [shard_label(s) for s in shards]
    if any(lb is None for lb in labels) and any(lb is not None for lb in labels):
        plain = shards[labels.index(None)]
        raise GoldenFileError("is not a shard (no --shard K/N), but the others are", plain.path)
    problems = []
    incomplete = [s.path for s in shards if not s.complete]
    if incomplete:
        problems.append(f"incomplete (an interrupted run; resume it first): {', '.join(incomplete)}")
    if labels[0] is not None:
        counts = {n for _, n in labels}
        if len(counts) > 1:
            raise GoldenFileError(f"shards of different splits: {', '.join(f'{k}/{n}' for k, n in labels)}",
                                  first.path)
        n = counts.pop()
        seen = {}
        for s, (k, _) in zip(shards, labels):
            if k in seen:
                raise GoldenFileError(f"shard {k}/{n} given twice: {seen[k]} and {s.path}", s.path)
            seen[k] = s.path
        missing = [f"{k}/{n}" for k in range(1, n + 1) if k not in seen]
        if missing:
            problems.append(f"missing shard{'s' if len(missing) > 1 else ''} {', '.join(missing)}")
    if problems and not allow_partial:
        raise GoldenFileError("; ".join(problems) + " (--allow-partial merges what there is into "
                              "a file marked partial)", first.path)
    dup: dict[str, str] = {}
    for s in shards:
        for case_id in s.case_ids():
            if case_id in dup:
                raise GoldenFileError(f"duplicate case id {case_id!r}: also in {dup[case_id]}", s.path)
            dup[case_id] = s.path
    return problems


def _merged_order(shards: list[GoldenFile]) -> list[tuple[GoldenFile, str]]:
    """(shard, case id) in the order of the unsharded selection: shard K of N holds the cases
    whose index mod N is K-1, so interleaving them restores it (shard by shard otherwise)."""
    labels = [shard_label(s) for s in shards]
    if labels[0] is None:
        return [(s, c) for s in shards for c in s.case_ids()]
    by_k = {k: s for s, (k, _) in zip(shards, labels)}
    n = labels[0][1]
    ids = {k: s.case_ids() for k, s in by_k.items()}
    order = []
    for j in range(max(len(v) for v in ids.values())):
        for k in range(1, n + 1):
            if k in ids and j < len(ids[k]):
                order.append((by_k[k], ids[k][j]))
    return order


def _copy_cases(out_path: str, root: dict, order: list[tuple[GoldenFile, str]],
                rows: dict, complete: bool) -> str:
    """Write ``out_path`` (its ``.part``, renamed when done; the caller holds its lock)."""
    tmp = part_path(out_path)
    ensure_space(tmp, sum(rows[c].stored_bytes for _, c in order))
    f = create_golden_file(tmp, root)
    try:
        copy_cases(f, ((gf.case_group(case_id), case_id) for gf, case_id in order))
        index.append(f, [rows[c] for _, c in order])
        f.attrs["complete"] = complete
        f.flush()
    except BaseException:
        f.close()
        if os.path.exists(tmp):
            os.remove(tmp)
        raise
    f.close()
    atomic_replace(tmp, out_path)
    return out_path


def merge(out_path, shard_paths, force: bool = False, allow_partial: bool = False) -> str:
    """Join the shard files of one run into ``out_path``; returns ``out_path``.

    Raises GoldenFileError when a shard is unreadable, when shards differ in sweep, seed,
    tier, schema or refspec version, when a shard is given twice or a case id occurs twice,
    when shards are missing or incomplete (unless ``allow_partial``: the output's ``partial``
    attribute then says what is missing, and it is never marked complete), or when
    ``out_path`` exists and ``force`` is False. The cases come in the order of the unsharded
    selection.
    """
    out_path = os.fspath(out_path)
    shard_paths = [os.fspath(p) for p in shard_paths]
    _check_output(out_path, shard_paths, force)
    with ExitStack() as stack:
        stack.enter_context(OutputLock(out_path))
        shards = [stack.enter_context(GoldenFile(p, allow_incomplete=True)) for p in shard_paths]
        problems = _check_shards(shards, allow_partial)
        root = {k: v for k, v in shards[0].attrs.items() if k not in _OWN}
        root.update(created=utc_now(), merged_from=json.dumps([os.path.basename(s.path) for s in shards]))
        if problems:
            root["partial"] = "; ".join(problems)
        rows = {r.case_id: r for s in shards for r in s.summary()}
        return _copy_cases(out_path, root, _merged_order(shards), rows, complete=not problems)


def pack(src_path, out_path, force: bool = False) -> str:
    """Copy the golden file ``src_path`` into one self-contained file (the cases of a
    ``--jobs`` run's index are copied out of its part files); returns ``out_path``."""
    out_path = os.fspath(out_path)
    _check_output(out_path, [os.fspath(src_path)], force, what="inputs")
    with OutputLock(out_path), GoldenFile(src_path, allow_incomplete=True) as gf:
        root = {k: v for k, v in gf.attrs.items() if k not in ("parts", "complete")}
        root["packed_from"] = os.path.basename(gf.path)
        rows = {r.case_id: r for r in gf.summary()}
        return _copy_cases(out_path, root, [(gf, c) for c in gf.case_ids()], rows, gf.complete)


def write_index(out_path, part_paths: list[str], order: list[str], root: dict) -> str:
    """The index file of a ``--jobs`` run: ``root`` attributes, ``parts`` (the part files
    relative to the index), and each case of ``order`` as an external link into its part
    (the caller holds the output's lock)."""
    out_path = os.fspath(out_path)
    base = os.path.dirname(os.path.abspath(out_path))
    names = [os.path.relpath(os.path.abspath(p), base) for p in part_paths]
    tmp = part_path(out_path)
    with ExitStack() as stack:
        parts = [stack.enter_context(GoldenFile(p, allow_incomplete=True)) for p in part_paths]
        where, rows = {}, {}
        for name, part in zip(names, parts):
            if not part.complete:
                raise GoldenFileError("part file is not complete", part.path)
            for row in part.summary():
                where[row.case_id], rows[row.case_id] = name, row
        missing = [c for c in order if c not in where]
        if missing:
            raise GoldenFileError(f"{len(missing)} cases are in no part file, e.g. {missing[0]}", out_path)
        ensure_space(tmp, sum(len(r.meta) + 512 for r in rows.values()))
        f = create_golden_file(tmp, {**root, "parts": json.dumps(names)})
        try:
            groups = CaseGroups(f)
            for case_id in order:
                groups.parent(case_id)[case_id.rsplit("/", 1)[-1]] = h5py.ExternalLink(
                    where[case_id], case_path(case_id))
                groups.add(case_id)
            index.append(f, [rows[c] for c in order])
            f.attrs["complete"] = True
            f.flush()
        except BaseException:
            f.close()
            os.remove(tmp)
            raise
        f.close()
    atomic_replace(tmp, out_path)
    return out_path
