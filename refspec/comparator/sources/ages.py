"""Actual outputs older than the golden file they are judged against (docs/compare.md, "Stale
outputs"): files a kernel wrote before the goldens existed, left in a folder that was exported
again, judge nothing about those goldens. Nothing here stops a comparison; the comparison
notes them."""

from __future__ import annotations

import os
from datetime import datetime

from ...inputs.user_cases import RECORDED_KINDS

__all__ = ["timestamp", "stale_before", "is_older", "older_note", "SHOWN"]

#: files named in the note (the rest are counted)
SHOWN = 5


def timestamp(created: str) -> float | None:
    """Seconds since the epoch of an ISO 8601 time as a golden file's ``created`` attribute
    spells it (``2026-12-01T21:42:19Z``); None when there is none or it is not a time."""
    if not created:
        return None
    try:
        return datetime.fromisoformat(created.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def stale_before(attrs: dict) -> float | None:
    """The time (seconds since the epoch) before which an actual file is older than the
    golden file with root attributes ``attrs``: its ``created`` time; None when it does not
    say, and for a golden file made from a kernel's recorded runs (``refspec golden``: the
    kernel's outputs were there before it)."""
    if attrs.get("sweep_name") in RECORDED_KINDS:
        return None
    return timestamp(str(attrs.get("created", "")))


def is_older(path: str, since: float) -> bool:
    """Whether the file ``path`` was last written before ``since`` (seconds since the epoch).
    ``created`` is whole seconds, rounded down: a file written after the golden file was
    started is never older."""
    try:
        return os.stat(path).st_mtime < since
    except OSError:
        return False


def older_note(paths: list[str], golden: str, created: str) -> str:
    """The note of a report on the actual files older than the golden file."""
    shown = ", ".join(paths[:SHOWN]) + (f" and {len(paths) - SHOWN} more"
                                        if len(paths) > SHOWN else "")
    return (f"{len(paths)} actual file{'s' if len(paths) != 1 else ''} older than the golden "
            f"file {golden} (made {created}): {shown}: written before these goldens "
            "existed (a kernel's outputs of an earlier export?): run the kernel again on "
            "this export before trusting their verdicts")
