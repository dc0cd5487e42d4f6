"""What a kernel that updates a cache in place may have done instead (docs/compare.md,
"Diagnosis", "Caches"): hypotheses generated from what a record declares of its caches.

They are ``refspec.ops.hypotheses.Variant``s like every other: a spec call, and an ``after``
that says how the kernel wrote a cache of that computation. For a cache the ``after`` is a
``CacheWrite``: where each element the call writes lands (``moved``: the flat offsets the spec
writes to the offsets the kernel writes, in the cache's named shape and axis letters), what else
it sets to 0 (``cleared``) and how it rounds into the cache's dtype (``rounding``, ``saturate``:
``refspec.spec.quant_dtypes.round_value``). The values themselves are always the spec's.

What the families read of the record: its in-place outputs and their axis letters (the letters
``B``, ``K``, ``S`` number the slots: a batch's own cache, a block of the paged pool, a slot in
either; ``refspec.spec.kv_cache.CACHE_AXES`` says which letters are the ND and the fractal NZ
layouts), and, declared by the record with ``quantisation``, which inputs scale and offset the
quantised values and whether the scale multiplies or divides. The families:

- ``slots``: each token written one slot later or earlier (a block's last slot carries into the
  next block, as a batch's into the next batch where the slots are numbered on; a batch's cache
  of its own, BNSD, wraps on itself), the two slot coordinates exchanged (block and
  slot), the slot numbers read in the other order (page and contiguous numbering confused);
- ``layouts``: a fractal (NZ) cache written row by row (ND), an ND cache written in tiles;
- ``cleared``: the whole block (or batch cache) of every written slot set to 0 before the write;
- ``roundings``: codes and values truncated instead of rounded, codes wrapped (or overflowed)
  instead of saturated;
- ``quantisation(...)``: the scale dividing where it multiplies (or the reverse: the spec called
  with its reciprocal), the offset's sign flipped (the spec called with it negated).
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import numpy as np

from ..spec.kv_cache import CACHE_AXES, element_offsets, nz_width
from .hypotheses import Variant
from .record import Call

__all__ = ["CacheWrite", "SLOT_LETTERS", "slots", "layouts", "cleared", "roundings",
           "quantisation", "CACHES"]

#: the axis letters that number a cache's slots: a batch's own cache (B), a block of the pool
#: (K), a slot in either (S)
SLOT_LETTERS = ("B", "K", "S")


class CacheWrite(NamedTuple):
    """How a kernel wrote a cache of a variant's computation (module docstring). ``moved(offsets,
    shape, axes, dtype)``: the flat offsets it writes the elements the spec writes at
    ``offsets`` to (-1: nowhere), or None when the mistake cannot happen in that cache;
    ``cleared(offsets, shape, axes)``: the further offsets it sets to 0."""

    moved: Callable | None = None
    cleared: Callable | None = None
    rounding: str = "nearest"
    saturate: bool = True

    def __call__(self, name: str, value):
        """As the ``after`` of an output that is no cache: no such output (None)."""
        return None


def _in_place(record, params: dict) -> list[str]:
    """The axis letters of each cache output of the record."""
    return [record.output_axes(params, o.name) or "" for o in record.outputs
            if getattr(o, "in_place", False)]


def _slot_axes(shape, axes: str) -> list[int]:
    return [i for i, ch in enumerate(axes) if ch in SLOT_LETTERS] if len(axes) == len(shape) else []


def _move_slots(dest: Callable) -> Callable:
    """``moved`` of a mistake in the slot a token goes to: ``dest(t, grid, own)`` the slot
    numbers (C order over the slot axes ``grid``) slot t's contents go to; ``own``: each batch
    has a cache of its own (BNSD: its slots are not numbered on from the previous batch's)."""
    def moved(offsets, shape, axes, dtype):
        pos = _slot_axes(shape, axes)
        if len(pos) != 2:
            return None
        idx = list(np.unravel_index(offsets, shape))
        grid = tuple(shape[i] for i in pos)
        t = np.ravel_multi_index([idx[i] for i in pos], grid)
        own = axes[pos[0]] == "B" and pos[1] != pos[0] + 1   # a batch's cache of its own
        new = np.unravel_index(dest(t, grid, own), grid)
        for j, i in enumerate(pos):
            idx[i] = new[j]
        return np.ravel_multi_index(idx, shape)
    return moved


def _step(by: int) -> Callable:
    def dest(t, grid, own):
        P, Q = grid
        if own:                                   # a batch's cache wraps on itself
            return (t // Q) * Q + (t % Q + by) % Q
        return (t + by) % (P * Q)                 # on into the next block (or batch)
    return dest


def _exchanged(t, grid, own):
    """Slot (p, q) of the (P, Q) grid written at (q mod P, p mod Q)."""
    P, Q = grid
    p, q = np.divmod(t, Q)
    return (q % P) * Q + p % Q


def _transposed(t, grid, own):
    """Slot number p*Q + q written at q*P + p (the grid numbered along its other axis)."""
    P, Q = grid
    return (t % Q) * P + t // Q


def slots(record, call: Call, params: dict) -> list[Variant]:
    """Tokens written into the wrong slot (module docstring)."""
    caches = [a for a in _in_place(record, params) if sum(ch in SLOT_LETTERS for ch in a) == 2]
    if not caches:
        return []
    outer = {"B": "batch", "K": "block"}[next((ch for ch in caches[0] if ch in "BK"), "K")]
    o = outer[0]
    return [Variant("slot", "each token written one slot later (slot + 1)", {"moved": "+1"}, call,
                    after=CacheWrite(_move_slots(_step(1)))),
            Variant("slot", "each token written one slot earlier (slot - 1)", {"moved": "-1"}, call,
                    after=CacheWrite(_move_slots(_step(-1)))),
            Variant("slot", f"{outer} and slot exchanged (the token of {outer} {o}, slot s written "
                    f"at {outer} s, slot {o})", {"moved": f"{outer}<->slot"}, call,
                    after=CacheWrite(_move_slots(_exchanged))),
            Variant("slot", f"the slots numbered {outer} by {outer} read slot by slot (page "
                    f"and contiguous numbering confused: slot {o}*S + s written at "
                    f"s*{o.upper()} + {o})",
                    {"moved": "transposed"}, call, after=CacheWrite(_move_slots(_transposed)))]


def _relaid(source: str, target: str) -> Callable:
    """``moved`` of a cache in layout ``source`` (its axis letters) written in ``target``: each
    element (block, slot, column) at the offset ``refspec.spec.kv_cache.element_offsets`` gives
    it in the other layout."""
    def moved(offsets, shape, axes, dtype):
        if axes != CACHE_AXES[source] or len(shape) != 4:
            return None
        c0 = nz_width(dtype)
        if source == "NZ":
            K, F, S, C = shape
            logical = (K, S, 1, F * C)
        else:
            K, S, N, D = shape
            logical = (K, S, 1, N * D)
        if logical[3] % c0:
            return None
        every = np.arange(K * S)
        here = element_offsets(every, source, logical, c0).reshape(-1)
        there = element_offsets(every, target, logical, c0).reshape(-1)
        where = np.empty(here.size, np.int64)
        where[here] = there
        return where[offsets]
    return moved


def layouts(record, call: Call, params: dict) -> list[Variant]:
    """A fractal cache written row by row, an ND cache written in tiles."""
    letters = set(_in_place(record, params))
    out = []
    if CACHE_AXES["NZ"] in letters:
        out.append(Variant("layout", "each block written row by row (ND) instead of in its "
                           "fractal tiles (NZ)", {"written": "ND", "layout": "NZ"}, call,
                           after=CacheWrite(_relaid("NZ", "ND"))))
    if CACHE_AXES["ND"] in letters:
        out.append(Variant("layout", "each block written in fractal tiles (NZ) instead of row by "
                           "row (ND)", {"written": "NZ", "layout": "ND"}, call,
                           after=CacheWrite(_relaid("ND", "NZ"))))
    return out


def _clear_outer(offsets, shape, axes):
    """Every offset of the blocks (or batch caches) that hold an offset written."""
    pos = _slot_axes(shape, axes)
    if not pos:
        return None
    axis = pos[0]
    outer = np.unique(np.unravel_index(offsets, shape)[axis])
    every = np.arange(int(np.prod(shape)))
    return every[np.isin(np.unravel_index(every, shape)[axis], outer)]


def cleared(record, call: Call, params: dict) -> list[Variant]:
    """The whole block of each written slot cleared before the write: slots outside the index
    written."""
    caches = [a for a in _in_place(record, params) if any(ch in "BK" for ch in a)]
    if not caches:
        return []
    outer = {"B": "batch's cache", "K": "block"}[next(ch for ch in caches[0] if ch in "BK")]
    return [Variant("outside", f"the whole {outer} of each written slot set to 0 before the "
                    "write (slots outside the index changed)", {"cleared": outer.split("'")[0]},
                    call, after=CacheWrite(cleared=_clear_outer))]


def roundings(record, call: Call, params: dict) -> list[Variant]:
    """Values truncated instead of rounded to nearest; codes wrapped instead of saturated."""
    if not _in_place(record, params):
        return []
    return [Variant("rounding", "the values written truncated (rounded toward zero) instead of "
                    "rounded to nearest", {"mode": "toward_zero"}, call,
                    after=CacheWrite(rounding="toward_zero")),
            Variant("quantisation", "codes wrapped instead of saturated (int8 modulo 256; a float "
                    "format's Inf or NaN)", {"saturation": "wrap"}, call,
                    after=CacheWrite(saturate=False))]


def quantisation(scales: tuple, offsets: tuple, divides: bool) -> Callable:
    """The record's declaration of its quantisation: the inputs that scale (``scales``) and
    offset (``offsets``) the values written, and whether the scale divides (``divides``) or
    multiplies. Its hypotheses: the spec with every scale's reciprocal (a kernel that multiplies
    where it should divide, or the reverse) and with every offset negated."""
    wrong, right = ("multiplied", "divided") if divides else ("divided", "multiplied")

    def variants(record, call: Call, params: dict) -> list[Variant]:
        out = []
        present = [n for n in scales if call.inputs.get(n) is not None]
        if present:
            with np.errstate(divide="ignore"):          # (the reciprocal in the input's dtype)
                new = {n: (1.0 / np.asarray(call.inputs[n], np.float64)).astype(
                    np.asarray(call.inputs[n]).dtype) for n in present}
            out.append(Variant("quantisation", f"scale {wrong} instead of {right}",
                               {"scale": wrong, "inputs": present}, _with(call, new),
                               after=CacheWrite()))
        present = [n for n in offsets if call.inputs.get(n) is not None]
        if present:
            new = {n: -np.asarray(call.inputs[n]) for n in present}
            out.append(Variant("quantisation", "the offset's sign flipped (subtracted instead of "
                               "added)", {"offset": "negated", "inputs": present},
                               _with(call, new), after=CacheWrite()))
        return out
    return variants


def _with(call: Call, new: dict) -> Call:
    return call._replace(inputs={**call.inputs, **new})


#: the families every record with caches declares (besides its ``quantisation``)
CACHES = (slots, layouts, cleared, roundings)
