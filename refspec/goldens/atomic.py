"""Files appear complete or not at all: written under a temporary name in the target's
directory, renamed over the target only when everything was written."""

from __future__ import annotations

import contextlib
import hashlib
import os

__all__ = ["atomic_open", "write_text_atomic", "write_chunks_atomic"]


def _temporary(path: str) -> str:
    """The temporary sibling a file is written under before it is renamed to ``path``."""
    return os.path.join(os.path.dirname(os.path.abspath(path)),
                        f".{os.path.basename(path)}.{os.getpid()}.tmp")


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
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


def write_chunks_atomic(path, chunks) -> tuple[int, str]:
    """Write the bytes-like ``chunks`` to ``path`` atomically with one system call each (no
    buffering layer: the chunks are large or few); returns (bytes written, SHA-256 hex)."""
    path = os.fspath(path)
    tmp = _temporary(path)
    digest = hashlib.sha256()
    size = 0
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666)
    try:
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
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise
    return size, digest.hexdigest()


def write_text_atomic(path, text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` atomically."""
    with atomic_open(path, "w", encoding="utf-8") as fh:
        fh.write(text)
