"""Case results passed from ``--jobs`` worker processes to the writer through shared memory.

A worker's :class:`refspec.cases.CaseData` would otherwise be pickled through a pipe: the
writer's process then reads every byte from the pipe and copies it again while unpickling,
holding the interpreter lock the writing thread needs (3.4 GB of arrays for the ``standard``
sweep). Instead, :func:`ship` (in the worker) writes a case's arrays into one file in a
run-private directory on a memory file system (``/dev/shm``) and replaces them by
:class:`Slot` descriptors; :func:`receive` (in the writer) maps the file read-only, removes its
name at once (the mapping stays valid until the arrays are gone) and rebuilds the arrays as
views of the mapping, which the HDF5 writer reads directly. Nothing but the bytes' location
changes: the arrays are the same dtype, shape and bits.

Where no such directory exists, or it runs out of room, cases travel by pickle as before.
"""

from __future__ import annotations

import dataclasses
import mmap
import os
import shutil
import tempfile
from typing import NamedTuple

import numpy as np

__all__ = ["MIN_BYTES", "Slot", "ship", "receive", "shared_directory", "remove_directory",
           "remove_stale"]

#: cases with fewer bytes of arrays are pickled (a file costs more than pickling them)
MIN_BYTES = 1 << 20
_ALIGN = 64
_SHM = "/dev/shm"


class Slot(NamedTuple):
    """Where one array of a shipped case lies in its file."""

    offset: int
    dtype: np.dtype
    shape: tuple


def shared_directory(nbytes: int) -> str | None:
    """A new private directory on a memory file system with at least ``nbytes`` free, or
    None (then cases are pickled). Its name carries this process's id, so that directories
    left by a killed run (whose process no longer exists) are removed first."""
    try:
        remove_stale()
        st = os.statvfs(_SHM)
        if st.f_bavail * st.f_frsize < nbytes or not os.access(_SHM, os.W_OK):
            return None
        return tempfile.mkdtemp(prefix=f"refspec-{os.getpid()}-", dir=_SHM)
    except OSError:
        return None


def remove_stale(root: str = _SHM) -> list[str]:
    """Remove the directories of :func:`shared_directory` under ``root`` whose process is gone
    (a run killed before it could clean up); returns their paths."""
    removed = []
    for name in os.listdir(root):
        parts = name.split("-")
        if len(parts) < 3 or parts[0] != "refspec" or not parts[1].isdigit():
            continue
        path = os.path.join(root, name)
        if _alive(int(parts[1])) or not os.path.isdir(path) or os.path.islink(path):
            continue
        shutil.rmtree(path, ignore_errors=True)
        removed.append(path)
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:                     # another user's process: alive, not ours to judge
        return True
    return True


def remove_directory(path: str | None) -> None:
    """Remove a directory made by :func:`shared_directory` with whatever is left in it."""
    if path:
        shutil.rmtree(path, ignore_errors=True)


def _entries(data, kind):
    """(group, key, value) of every value of type ``kind`` among a CaseData's inputs, expected
    and exact outputs and the sum_abs of its terms (group "terms")."""
    for group in ("inputs", "expected", "exact"):
        for k, v in getattr(data, group).items():
            if isinstance(v, kind):
                yield group, k, v
    for k, t in data.terms.items():
        if isinstance(t.sum_abs, kind):
            yield "terms", k, t.sum_abs


def _replace(data, values: dict):
    """A copy of ``data`` with the arrays named in ``values`` ((group, key) -> value)."""
    groups = {g: dict(getattr(data, g)) for g in ("inputs", "expected", "exact")}
    terms = dict(data.terms)
    for (group, k), v in values.items():
        if group == "terms":
            terms[k] = terms[k]._replace(sum_abs=v)
        else:
            groups[group][k] = v
    return dataclasses.replace(data, **groups, terms=terms)


def ship(data, directory: str | None, min_bytes: int = MIN_BYTES):
    """``data`` with its arrays moved into a file in ``directory`` (worker side); ``data``
    itself when its arrays hold fewer than ``min_bytes``, when ``directory`` is None or when
    the file cannot be written."""
    arrays = list(_entries(data, np.ndarray))
    total = sum(a.nbytes for *_, a in arrays)
    if directory is None or total < min_bytes:
        return data
    try:
        fd, path = tempfile.mkstemp(dir=directory, prefix="case-")
    except OSError:
        return data
    slots, offset = {}, 0
    try:
        with os.fdopen(fd, "wb", buffering=0) as fh:
            for group, k, a in arrays:
                pad = -offset % _ALIGN
                if pad:
                    fh.write(bytes(pad))
                    offset += pad
                a = np.ascontiguousarray(a)
                view = memoryview(a.reshape(-1).view(np.uint8))
                while view.nbytes:                    # a raw write may be partial
                    n = fh.write(view)
                    view = view[n:]
                    offset += n
                slots[group, k] = Slot(offset - a.nbytes, a.dtype, a.shape)
    except OSError:
        try:
            os.unlink(path)
        except OSError:
            pass
        return data
    return dataclasses.replace(_replace(data, slots), shipped_to=path)


def receive(data):
    """The CaseData :func:`ship` made, with its arrays as read-only views of the file's
    mapping (writer side); the file's name is removed. Unshipped data is returned as is."""
    path = data.shipped_to
    if path is None:
        return data
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        flags = mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0)
        mm = mmap.mmap(fd, size, flags=flags, prot=mmap.PROT_READ) if size else b""
    finally:
        os.close(fd)
        os.unlink(path)
    values = {}
    for group, k, slot in _entries(data, Slot):
        count = int(np.prod(slot.shape, dtype=np.int64))
        values[group, k] = np.frombuffer(mm, slot.dtype, count, slot.offset).reshape(slot.shape)
    return dataclasses.replace(_replace(data, values), shipped_to=None)
