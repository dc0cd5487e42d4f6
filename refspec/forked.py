"""Parts of one large case computed side by side in forked processes.

The blocked evaluation (:mod:`refspec.blocked`) cuts a case into parts whose outputs do not
overlap. The parent computes the first part itself while one forked child per other part
computes the rest into its own (copy-on-write) view of the same output arrays; the parent then
copies each child's output regions out of the child's memory with Linux's
``process_vm_readv`` (one kernel copy, no shared-memory page faults) before letting the child
exit. Where that call is not permitted (some container profiles forbid it), the outputs are
allocated in anonymous shared memory instead, which children write directly. Nothing but the
output regions passes between the processes, so the result is the same bits whatever the
number of processes.

Threads are the alternative (``refspec.blocked.THREADS``), but a block's arithmetic is a few
dozen NumPy calls on cache-sized arrays, and the interpreter lock serialises the calls of two
threads; two processes do not share it.

Forking needs POSIX ``os.fork``; elsewhere, or with :data:`PROCESSES` set to 1, the parts run
one after the other in this process.
"""

from __future__ import annotations

import ctypes
import itertools
import mmap
import os
import signal
from math import prod

import numpy as np

from .linux import libc_function

__all__ = ["PROCESSES", "available", "output_empty", "run_parts", "single_process"]

#: processes that compute the parts of one case (set to 1 inside --jobs worker processes)
PROCESSES = min(2, os.cpu_count() or 1)
_IOV_MAX = 1024
_readv_ok: bool | None = None            # process_vm_readv permitted here (probed once)


def available() -> bool:
    """Whether parts can run in forked processes here."""
    return PROCESSES > 1 and hasattr(os, "fork")


def single_process() -> None:
    """Compute every part in this process (worker processes of ``--jobs`` share the CPUs)."""
    global PROCESSES
    PROCESSES = 1


class _Iovec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]


#: process_vm_readv(2), or None
_READV = libc_function("process_vm_readv",
                       [ctypes.c_int, ctypes.POINTER(_Iovec), ctypes.c_ulong,
                        ctypes.POINTER(_Iovec), ctypes.c_ulong, ctypes.c_ulong],
                       ctypes.c_ssize_t)


def _segments(view: np.ndarray) -> list[tuple[int, int]]:
    """(address, bytes) of the contiguous runs of ``view`` (a view of a C-ordered array)."""
    if view.size == 0:
        return []
    k, run = view.ndim, view.itemsize
    while k and (view.shape[k - 1] == 1 or view.strides[k - 1] == run):
        run *= view.shape[k - 1]
        k -= 1
    base, strides = view.ctypes.data, view.strides[:k]
    return [(base + sum(i * s for i, s in zip(idx, strides)), run)
            for idx in itertools.product(*(range(n) for n in view.shape[:k]))]


def _pull(pid: int, views: list[np.ndarray]) -> None:
    """Copy ``views`` from process ``pid`` (same virtual addresses) into this process."""
    segs = [seg for v in views for seg in _segments(v)]
    for i in range(0, len(segs), _IOV_MAX):
        batch = segs[i:i + _IOV_MAX]
        iov = (_Iovec * len(batch))(*(_Iovec(a, n) for a, n in batch))
        want = sum(n for _, n in batch)
        got = _READV(pid, iov, len(batch), iov, len(batch), 0)
        if got != want:
            err = ctypes.get_errno()
            raise OSError(err, f"process_vm_readv copied {got} of {want} bytes: {os.strerror(err)}")


def _probe_readv() -> bool:
    """Whether this process may read a forked child's memory (tried once on a small buffer)."""
    global _readv_ok
    if _readv_ok is None:
        _readv_ok = False
        if _READV is not None and available():
            buf = np.zeros(1024)
            r, w = os.pipe()
            pid = os.fork()
            if pid == 0:
                buf[:] = 1.0
                os.close(r)
                os.write(w, b"1")
                signal.pause()
                os._exit(0)
            os.close(w)
            try:
                os.read(r, 1)
                _pull(pid, [buf])
                _readv_ok = bool(np.all(buf == 1.0))
            except OSError:
                _readv_ok = False
            finally:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                os.close(r)
    return _readv_ok


def output_empty(shape: tuple, dtype=np.float64) -> np.ndarray:
    """An uninitialised output array that forked parts can fill: an ordinary array when the
    parent copies children's regions out of their memory (or nothing is forked), anonymous
    shared memory otherwise."""
    dtype = np.dtype(dtype)
    nbytes = prod(shape) * dtype.itemsize
    if not available() or nbytes == 0 or _probe_readv():
        return np.empty(shape, dtype)
    buf = mmap.mmap(-1, nbytes, flags=mmap.MAP_SHARED | getattr(mmap, "MAP_ANONYMOUS", 0x20),
                    prot=mmap.PROT_READ | mmap.PROT_WRITE)
    return np.frombuffer(buf, dtype).reshape(shape)


def _child(fn, part, status_w: int, release_r: int) -> None:
    """The forked side: compute, report, wait until the parent has copied the outputs."""
    code = 1
    try:
        fn(part)
        code = 0
    except BaseException:                                  # noqa: BLE001 - reported, then exit
        import traceback
        traceback.print_exc()
    finally:
        try:
            os.write(status_w, b"0" if code == 0 else b"1")
            os.read(release_r, 1)
        finally:
            os._exit(code)


def run_parts(fn, parts: list, outputs=None) -> None:
    """``fn(part)`` for every part: the first in this process, each other one in a forked
    child, all at once. ``outputs(part)`` lists the array views (of arrays made by
    :func:`output_empty`) that ``fn(part)`` writes; they are copied back from each child.
    Raises RuntimeError if a child fails (its traceback is on stderr)."""
    parts = list(parts)
    if len(parts) <= 1 or not available():
        for part in parts:
            fn(part)
        return
    pull = _probe_readv()
    children = []                                          # (pid, part, status_r, release_w)
    try:
        for part in parts[1:]:
            status_r, status_w = os.pipe()
            release_r, release_w = os.pipe()
            pid = os.fork()
            if pid == 0:
                _child(fn, part, status_w, release_r)
            os.close(status_w)
            os.close(release_r)
            children.append((pid, part, status_r, release_w))
        fn(parts[0])
        failed = 0
        for pid, part, status_r, release_w in children:
            ok = os.read(status_r, 1) == b"0"
            if ok and pull and outputs is not None:
                _pull(pid, outputs(part))
            failed += not ok
            os.write(release_w, b"0")
    except BaseException:
        for pid, *_ in children:                           # do not leave orphans computing
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        raise
    finally:
        for pid, _, status_r, release_w in children:
            os.waitpid(pid, 0)
            os.close(status_r)
            os.close(release_w)
    if failed:
        raise RuntimeError(f"{failed} of {len(children)} forked part(s) of the blocked "
                           "evaluation failed (see the traceback above)")
