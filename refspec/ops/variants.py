"""One alternative spec call (``Variant``), and the hypotheses a record declares of its own in
``Comparison.hypotheses`` (docs/compare.md, "Diagnosis"): an attribute's other values
(``other_values``), a statistic inside the formula taken over another axis (``other_axes``),
inputs replaced (``replaced_inputs``), the bytes of one layout read as another
(``reread_layout``). ``refspec.ops.hypotheses`` generates the others from the record's
declarations."""

from __future__ import annotations

from typing import Callable, NamedTuple

import numpy as np

from .record import Call

__all__ = ["Variant", "other_values", "other_axes", "replaced_inputs", "reread_layout"]


class Variant(NamedTuple):
    """One alternative spec call. ``kind`` and ``detail`` are the finding it gives when the
    kernel matches it (docs/compare.md, "Diagnosis"); ``summary`` says it in a few words
    (``"mode interleave instead of half"``). Its outputs are compared with the kernel's in memory
    order, so a variant that reads the same bytes in another shape needs no reshaping back.
    ``parts``: (coefficient, Call) pairs whose spec outputs are added to ``call``'s (the cos and
    sin terms of a rotation, evaluated apart); ``after(name, value)``: how the kernel wrote an
    output of that computation (an index permutation, a broadcast), or None."""

    kind: str
    summary: str
    detail: dict
    call: Call
    parts: tuple = ()
    after: Callable | None = None


def other_values(axis: str) -> Callable:
    """The spec under every other value of one attribute axis (``mode``, ``norm_type``,
    ``concat_order``): a kernel that took the wrong branch."""

    def variants(record, call: Call, params: dict) -> list[Variant]:
        ax = record.sweep.axis(axis)
        here = params.get(axis)
        out = []
        for value in ax.values:
            if value == here or ax.attr is None:
                continue
            attrs = {**call.attrs, ax.attr: ax.to_spec(value)}
            out.append(Variant("alternative", f"{axis} {value} instead of {here}",
                               {"param": axis, "value": value}, call._replace(attrs=attrs)))
        return out
    return variants


def replaced_inputs(label: str, replace: Callable[[Call, dict], dict | None],
                    param: str, value: str) -> Callable:
    """The spec with some inputs replaced by ``replace(call, params)`` (None: not applicable),
    e.g. NormRopeConcatBackward's mean and rstd recomputed from its inputs by the forward."""

    def variants(record, call: Call, params: dict) -> list[Variant]:
        new = replace(call, params)
        if new is None:
            return []
        return [Variant("alternative", label, {"param": param, "value": value},
                        call._replace(inputs={**call.inputs, **new}))]
    return variants


def other_axes(keyword: str, tensor: str, what: str) -> Callable:
    """The spec with ``what`` (a statistic it takes over the last axis of ``tensor``) taken over
    each other axis of ``tensor`` longer than 1, given to the spec by ``keyword`` (its axis,
    negative): a kernel whose reduction inside the formula runs over the wrong axis."""

    def variants(record, call: Call, params: dict) -> list[Variant]:
        arr, letters = call.inputs.get(tensor), record.input_axes(params, tensor)
        if arr is None or not letters or len(letters) != np.ndim(arr):
            return []
        return [Variant("reduction", f"{what} taken over {x} instead of {letters[-1]}",
                        {"axes": [x], "of": what}, call._replace(
                            attrs={**call.attrs, keyword: i - np.ndim(arr)}))
                for i, x in enumerate(letters[:-1]) if np.shape(arr)[i] > 1]
    return variants


def reread_layout(axis: str, shape_of: Callable[[str, Call, dict, str], tuple | None]) -> Callable:
    """The spec on the same bytes read in another layout (BSND data taken for BNSD): every
    input reshaped, without moving a byte, to the shape ``shape_of(name, call, params, layout)`` gives
    it in the other layout (None: leave it); its outputs, in memory order, are the bytes such a
    kernel writes."""

    def variants(record, call: Call, params: dict) -> list[Variant]:
        ax = record.sweep.axis(axis)
        here = params.get(axis)
        out = []
        for value in ax.values:
            if value == here:
                continue
            inputs, ok, moved = dict(call.inputs), True, False
            for name, arr in call.inputs.items():
                shape = None if arr is None else shape_of(name, call, params, value)
                if shape is None:
                    continue
                if int(np.prod(shape)) != np.size(arr):
                    ok = False
                    break
                inputs[name] = np.asarray(arr).reshape(shape)
                moved = moved or shape != np.shape(arr)
            if ok and moved:
                out.append(Variant("alternative", f"the bytes read as {value} instead of {here}",
                                   {"param": axis, "value": value}, call._replace(inputs=inputs)))
        return out
    return variants
