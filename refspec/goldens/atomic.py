"""Files appear complete or not at all: written under a temporary name in the target's
directory, renamed over the target only when everything was written; and one writer per
output at a time (``OutputLock``).

A write that fails (a full disk: ``ENOSPC``) raises an ``OSError`` naming the target file;
the temporary is removed and an existing target is left as it was.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import glob
import hashlib
import os
import shutil

from .format import GoldenFileLockedError

__all__ = ["atomic_open", "write_text_atomic", "write_chunks_atomic", "OutputLock",
           "lock_path", "temporaries", "ensure_space", "SPACE_RESERVE"]

#: free space a writer of HDF5 files leaves on its file system: HDF5 cannot recover from a
#: write that fails for want of space (its metadata can no longer be flushed, h5py reports
#: every object it then releases, and the library may crash when it closes the file), so the
#: writers stop with a clean error before the disk is full (``ensure_space``)
SPACE_RESERVE = 16 << 20


def _temporary(path: str) -> str:
    """The temporary sibling a file is written under before it is renamed to ``path``."""
    return os.path.join(os.path.dirname(os.path.abspath(path)),
                        f".{os.path.basename(path)}.{os.getpid()}.tmp")


def temporaries(path) -> list[str]:
    """The temporaries of ``path`` that writers (of any process) left behind."""
    path = os.fspath(path)
    pattern = os.path.join(glob.escape(os.path.dirname(os.path.abspath(path))),
                           f".{glob.escape(os.path.basename(path))}.*.tmp")
    return sorted(glob.glob(pattern))


def _naming(exc: OSError, path: str) -> OSError:
    """``exc`` naming ``path`` when it names no file (``os.write`` on a full disk)."""
    if exc.filename or exc.errno is None:
        return exc
    return OSError(exc.errno, exc.strerror, path)


@contextlib.contextmanager
def atomic_open(path, mode: str = "w", **kwargs):
    """``open`` a temporary sibling of ``path``; on success rename it to ``path``, on any
    exception remove it (an existing ``path`` is then left untouched)."""
    path = os.fspath(path)
    tmp = _temporary(path)
    try:
        with open(tmp, mode, **kwargs) as fh:
            yield fh
        os.replace(tmp, path)
    except BaseException as exc:
        if os.path.exists(tmp):
            os.remove(tmp)
        if isinstance(exc, OSError):
            raise _naming(exc, path) from None
        raise


def write_chunks_atomic(path, chunks) -> tuple[int, str]:
    """Write the bytes-like ``chunks`` to ``path`` atomically with one system call each (no
    buffering layer: the chunks are large or few); returns (bytes written, SHA-256 hex)."""
    path = os.fspath(path)
    tmp = _temporary(path)
    digest = hashlib.sha256()
    size = 0
    if os.path.lexists(tmp):                  # left by a killed process of the same number
        os.remove(tmp)
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o666)
        try:
            for chunk in chunks:
                view = memoryview(chunk).cast("B")
                digest.update(view)
                while view:
                    n = os.write(fd, view)
                    size += n
                    view = view[n:]
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException as exc:
        if os.path.lexists(tmp):
            os.remove(tmp)
        if isinstance(exc, OSError):
            raise _naming(exc, path) from None
        raise
    return size, digest.hexdigest()


def write_text_atomic(path, text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` atomically."""
    with atomic_open(path, "w", encoding="utf-8") as fh:
        fh.write(text)


def ensure_space(path, nbytes: int) -> None:
    """``OSError(ENOSPC)`` naming ``path`` unless the file system of its folder has room for
    ``nbytes`` more bytes and ``SPACE_RESERVE`` besides. A writer of HDF5 files asks before
    each piece it writes, so a full disk stops it while it can still close its file."""
    free = shutil.disk_usage(os.path.dirname(os.path.abspath(os.fspath(path)))).free
    if free < nbytes + SPACE_RESERVE:
        raise OSError(errno.ENOSPC, f"No space left on device: {free} bytes free, {nbytes} to "
                      f"write and {SPACE_RESERVE} kept free", os.fspath(path))


def lock_path(path) -> str:
    """The lock file of an output: ``<path>.lock`` (removed when its holder releases it)."""
    return os.fspath(path) + ".lock"


class OutputLock:
    """The one writer of an output: an exclusive ``flock`` on ``<path>.lock``, taken before
    anything named after ``path`` is created, renamed, truncated or removed, held until
    ``release`` (or the holder's end: the system releases a killed process's lock, and the
    next holder reuses its file). A second writer of the same output gets
    ``GoldenFileLockedError`` naming the file, at once, and changes nothing. Readers do not
    take it (HDF5 locks a file it reads)."""

    def __init__(self, path):
        self.path = os.fspath(path)
        self.file = lock_path(self.path)
        self._fd = None

    def acquire(self) -> "OutputLock":
        while self._fd is None:
            fd = os.open(self.file, os.O_RDWR | os.O_CREAT, 0o666)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                raise GoldenFileLockedError(
                    f"being written by another process (it holds {self.file}); wait for it "
                    "to end, or stop it", self.path) from None
            try:                               # still the lock file, not one removed meanwhile
                same = os.stat(self.file).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                same = False
            if same:
                self._fd = fd
            else:
                os.close(fd)
        return self

    def release(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            try:
                os.remove(self.file)
            except OSError:
                pass
            os.close(fd)

    def __enter__(self):
        return self.acquire()

    def __exit__(self, *exc):
        self.release()
        return False
