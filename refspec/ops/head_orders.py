"""Where a kernel that reads a head of D elements at the wrong index takes each element from
(docs/compare.md, "Diagnosis"): the index maps the generated hypotheses
(``refspec.ops.hypotheses``) read inputs with, and the diagnosis writes the golden with."""

from __future__ import annotations

from typing import Callable

import numpy as np

__all__ = ["head_maps", "ORDERS", "READS", "along_heads", "heads_after"]


def head_maps(h: int) -> dict[str, np.ndarray]:
    """Where a kernel reading a head of ``h`` elements wrongly takes element i from: its halves
    exchanged, its pairs exchanged, one element ahead (i + 1), one behind (i - 1), reversed,
    both halves and pairs exchanged (the partner of i in one pairing moved to its partner in the
    other), its halves interleaved or its pairs taken apart (a layout step done or skipped)."""
    i = np.arange(h)
    out = {"next": (i + 1) % h, "previous": (i - 1) % h, "reversed": h - 1 - i}
    if h % 2 == 0:
        half = h // 2
        out = {"halves": (i + half) % h, "pairs": i ^ 1, **out,
               "halves+pairs": ((i + half) % h) ^ 1,
               "interleaved": np.where(i % 2 == 0, i // 2, i // 2 + half),
               "de-interleaved": np.where(i < half, 2 * i, 2 * (i - half) + 1)}
    return out


#: the reads ``_read_at`` tries that ``_partners`` does not (orders of a whole head, not a
#: partner's place)
ORDERS = ("interleaved", "de-interleaved")


#: how each map reads, for a summary
READS = {"halves": "its halves exchanged", "pairs": "its pairs exchanged",
          "next": "one element ahead (d + 1 for d)", "previous": "one element behind (d - 1 for d)",
          "reversed": "reversed (D - 1 - d for d)",
          "halves+pairs": "its halves and its pairs exchanged",
          "interleaved": "its halves interleaved (2i takes i, 2i + 1 takes i + D/2)",
          "de-interleaved": "its pairs taken apart (i takes 2i, i + D/2 takes 2i + 1)"}


def along_heads(arr, h: int, index: np.ndarray) -> np.ndarray:
    """``arr`` with the elements of each head of ``h`` (its last axis) taken at ``index``."""
    a = np.asarray(arr)
    heads = a.reshape(a.shape[:-1] + (a.shape[-1] // h, h))
    return np.ascontiguousarray(np.take(heads, index, axis=-1).reshape(a.shape))


def heads_after(h: int, index: np.ndarray, letter: str, record, params) -> Callable:
    """``after`` of a variant: outputs whose last axis is the head axis rearranged by
    ``index`` within each head; the others as computed."""
    def after(name: str, value: np.ndarray) -> np.ndarray:
        letters = record.output_axes(params, name)
        if not letters or letters[-1] != letter or np.shape(value)[-1] % h:
            return value
        return along_heads(value, h, index)
    return after
