"""Linux system calls that the standard library does not expose, looked up in the C library."""

from __future__ import annotations

import ctypes
import sys

__all__ = ["libc_function"]


def libc_function(name: str, argtypes: list, restype):
    """The C library's ``name`` with its argument and result types (errno kept), or None when
    not on Linux or the function does not exist."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        fn = getattr(ctypes.CDLL(None, use_errno=True), name)
    except (OSError, AttributeError):
        return None
    fn.argtypes = argtypes
    fn.restype = restype
    return fn
