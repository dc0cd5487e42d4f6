"""Which elements of a failing output the diagnosis reads (docs/compare.md, "Diagnosis", cost):
the whole output and case when they are small, else a slice of the case along the axes its
operator computes independently (``Comparison.independent``: batches, heads, tokens), so that
the spec's hypotheses are evaluated on a small case of their own, or, for an operator that
declares none, evenly spaced rows of the output. Memory is bounded by ``VIEW_ELEMENTS`` and
``CASE_ELEMENTS`` whatever the output's shape (a batch of one included): the slice's elements
are read in runs of consecutive elements, its inputs as index lists through h5py."""

from __future__ import annotations

from dataclasses import dataclass
from itertools import product
from math import prod

import numpy as np

from ..judging.streaming import BlockReader

__all__ = ["View", "VIEW_ELEMENTS", "CASE_ELEMENTS", "choose_view", "read_actual",
           "read_golden", "view_inputs",
           "letters_of"]

#: at most this many elements of an output are diagnosed
VIEW_ELEMENTS = 1 << 14
#: the inputs of a case (or of its slice) the hypotheses are evaluated on hold at most this many
#: elements together
CASE_ELEMENTS = 1 << 16


@dataclass(frozen=True, eq=False)
class View:
    """The elements read: ``picks`` (output axis -> sorted indices; the axes left out whole),
    ``letters`` (axis letter -> the same indices, for slicing the inputs; None when the view is
    no slice of the case, {} for the whole case), their flat indices ``flat`` (C order) and the
    ``runs`` (key, flat start, count) of consecutive elements they are read in; ``shape`` the
    shape of the picked grid."""

    picks: dict
    letters: dict | None
    flat: np.ndarray
    runs: list
    shape: tuple

    @property
    def slices_case(self) -> bool:
        return self.letters is not None


def letters_of(text: str, ndim: int) -> list:
    """The letters of an array's axes from its axes text (naming its last axes; None for an
    unnamed one)."""
    names = list(text[-ndim:]) if text and ndim else []
    return [None] * (ndim - len(names)) + names


def _input_shapes(case, record, params) -> dict:
    """name -> (shape, letters) of each present input (shapes only: nothing is read)."""
    out = {}
    for name in getattr(case, "input_names", []):
        arr = case.inputs[name]
        shape = tuple(np.shape(arr)) if not hasattr(arr, "shape") else tuple(arr.shape)
        text = record.input_axes(params, name) if record is not None else ""
        out[name] = (shape, letters_of(text, len(shape)))
    return out


def choose_view(golden, case, record, worst: int | None = None) -> View:
    """The view of one failing output (the module docstring); ``worst`` the flat index of its
    worst element, kept in the view."""
    shape = tuple(golden.shape)
    n = prod(shape)
    params = record.upgrade_params(case.params) if record is not None else dict(case.params)
    inputs = _input_shapes(case, record, params)
    case_size = sum(prod(s) for s, _ in inputs.values())
    if n <= VIEW_ELEMENTS and case_size <= CASE_ELEMENTS:
        return _picked(shape, {}, {})
    picks = _slice(shape, letters_of(golden.axes, len(shape)), inputs,
                   record.comparison.independent if record is not None else (), worst)
    if picks is not None:
        letters = letters_of(golden.axes, len(shape))
        return _picked(shape, picks, {letters[a]: idx for a, idx in picks.items()})
    if n <= VIEW_ELEMENTS:
        return _picked(shape, {}, None)
    return _rows(shape, worst)


def _slice(shape, out_letters, inputs, independent, worst) -> dict | None:
    """Indices along the output's independent axes such that the output's picked elements and
    the inputs cut likewise fit the budgets (halving the largest count first), or None."""
    sliceable = [a for a, letter in enumerate(out_letters)
                 if letter in independent and shape[a] > 1
                 and all(s[l.index(letter)] in (1, shape[a]) for s, l in inputs.values()
                         if letter in l)]
    if not sliceable:
        return None
    counts = {a: shape[a] for a in sliceable}

    def sizes():
        out = prod(counts.get(a, s) for a, s in enumerate(shape))
        cut = {out_letters[a]: k for a, k in counts.items()}
        case = sum(prod(cut[x] if x in cut and s[i] > 1 else s[i] for i, x in enumerate(l))
                   for s, l in inputs.values())
        return out, case

    out, case = sizes()
    while out > VIEW_ELEMENTS or case > CASE_ELEMENTS:
        a = max(counts, key=lambda k: counts[k])
        if counts[a] == 1:
            return None
        counts[a] = (counts[a] + 1) // 2
        out, case = sizes()
    where = np.unravel_index(worst, shape) if worst is not None else None
    return {a: _spread(shape[a], k, None if where is None else int(where[a]))
            for a, k in counts.items() if k < shape[a]} or None


def _spread(size: int, k: int, keep: int | None) -> np.ndarray:
    """``k`` evenly spaced indices of ``size`` (the first and the last among them), ``keep``
    one of them."""
    idx = np.unique(np.linspace(0, size - 1, max(k, 1)).round().astype(np.int64))
    if keep is not None and keep not in idx:
        idx[np.argmin(np.abs(idx - keep))] = keep
        idx = np.unique(idx)
    return idx


def _picked(shape, picks: dict, letters: dict | None) -> View:
    """The view of ``picks``: one run of consecutive elements per index of the axes up to the
    last picked one (its key those indices, the later axes whole)."""
    last = max(picks) if picks else -1
    tail = prod(shape[last + 1:])
    runs, flat = [], []
    for index in product(*(picks.get(a, range(shape[a])) for a in range(last + 1))):
        f0 = int(np.ravel_multi_index(index, shape[:last + 1])) * tail if index else 0
        runs.append((tuple(int(i) for i in index), f0, tail))
        flat.append(np.arange(f0, f0 + tail, dtype=np.int64))
    grid = tuple(len(picks[a]) if a in picks else s for a, s in enumerate(shape))
    return View(picks, letters, np.concatenate(flat), runs, grid)


def _rows(shape, worst) -> View:
    """Evenly spaced rows of an output no slice of its case fits (and the row of its worst
    element): runs of the last axes, at most ``VIEW_ELEMENTS`` elements."""
    axis = next(i for i in range(len(shape)) if prod(shape[i + 1:]) <= VIEW_ELEMENTS // 16)
    rows = prod(shape[:axis + 1])
    row = prod(shape[axis + 1:])
    keep = None if worst is None else worst // row
    picked = _spread(rows, max(1, VIEW_ELEMENTS // row), keep)
    runs = []
    for r in picked:
        index = tuple(int(i) for i in np.unravel_index(int(r), shape[:axis + 1]))
        runs.append((index, int(r) * row, row))
    flat = np.concatenate([np.arange(f0, f0 + c, dtype=np.int64) for _, f0, c in runs])
    return View({}, None, flat, runs, (len(runs) * row,))


def read_actual(view: View, actual) -> np.ndarray:
    """The view's elements of an actual output (``ActualArray.read``), flat, in its dtype (each
    run copied: a reader may hand every block in one buffer)."""
    parts = [np.array(actual.read(k, f0, c), copy=True).reshape(-1) for k, f0, c in view.runs]
    return np.concatenate(parts) if len(parts) > 1 else parts[0]


def read_golden(view: View, array, dtype=np.float64) -> np.ndarray:
    """The view's elements of a golden array (a LazyArray or an array in memory), flat."""
    reader = BlockReader(array, dtype)
    try:
        return np.concatenate([np.array(reader.read(k, f0, c), copy=True).reshape(-1)
                               for k, f0, c in view.runs])
    finally:
        reader.close()


def view_inputs(view: View, case, record) -> dict | None:
    """The case's inputs cut to the view's slice (index lists along its letters; the inputs
    whole for a view of the whole case); None when the view is no slice of the case."""
    if view.letters is None:
        return None
    if not view.letters:
        return dict(case.input_arrays())
    params = record.upgrade_params(case.params)
    out = {}
    for name in case.input_names:
        arr = case.inputs[name]
        shape = tuple(arr.shape)
        letters = letters_of(record.input_axes(params, name), len(shape))
        cuts = [(i, view.letters[x]) for i, x in enumerate(letters)
                if x in view.letters and shape[i] > 1]
        if not cuts:
            out[name] = np.asarray(arr[()])
            continue
        (i0, first), rest = cuts[0], cuts[1:]
        value = np.asarray(arr[(slice(None),) * i0 + (first.tolist(),)])
        for i, idx in rest:
            value = np.take(value, idx, axis=i)
        out[name] = value
    return out
