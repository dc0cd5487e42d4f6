"""What a wrong kernel may have computed instead, as data on an operator record
(docs/compare.md, "Diagnosis").

A hypothesis is a function ``(record, call, params) -> [Variant, ...]``: each variant is the
spec call that a kernel with one particular mistake would match (another value of an attribute,
cos and sin exchanged, the sin term's sign flipped, a reduction over fewer axes, the same bytes
read in another layout, statistics recomputed). The comparator evaluates a variant with the spec
itself (``Operator.call``) and reports it only when the kernel's output agrees with it far better
than with the golden; no formula is written here. A record lists the hypotheses that make sense
for it in ``Comparison.hypotheses``.
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import numpy as np

from .record import Call

__all__ = ["Variant", "other_values", "exchanged", "negated", "fewer_reduced", "reread_layout",
           "replaced_inputs"]


class Variant(NamedTuple):
    """One alternative spec call. ``kind`` and ``detail`` are the finding it gives when the
    kernel matches it (docs/compare.md, "Diagnosis"); ``summary`` says it in a few words
    (``"mode interleave instead of half"``). Its outputs are compared with the kernel's in memory
    order, so a variant that reads the same bytes in another shape needs no reshaping back."""

    kind: str
    summary: str
    detail: dict
    call: Call


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


def exchanged(first: str, second: str) -> Callable:
    """The spec with two inputs exchanged (cos and sin swapped)."""

    def variants(record, call: Call, params: dict) -> list[Variant]:
        t = call.inputs
        if t.get(first) is None or t.get(second) is None or \
                np.shape(t[first]) != np.shape(t[second]):
            return []
        inputs = {**t, first: t[second], second: t[first]}
        return [Variant("alternative", f"{first} and {second} exchanged",
                        {"param": "inputs", "value": f"{first}<->{second}"},
                        call._replace(inputs=inputs))]
    return variants


def negated(name: str, term: str | None = None) -> Callable:
    """The spec with one input's sign flipped: the sign of the term it multiplies (the sin term
    of a rotation: rotating by -theta)."""

    def variants(record, call: Call, params: dict) -> list[Variant]:
        if call.inputs.get(name) is None:
            return []
        value = np.asarray(call.inputs[name])
        inputs = {**call.inputs, name: -value}
        label = term or name
        return [Variant("sign", f"the sign of the {label} term flipped", {"term": label},
                        call._replace(inputs=inputs))]
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


def fewer_reduced(data: tuple[str, ...], table: str, letters: Callable[[dict], str]) -> Callable:
    """The reductions of a table's gradient (RoPE's dcos/dsin: summed over the axes where the
    table has size 1) over one axis fewer: the spec on the ``data`` inputs cut to their first
    index along that axis, as a kernel that skips the accumulation over it computes.
    ``letters(params)`` names the axes of the data inputs."""

    def variants(record, call: Call, params: dict) -> list[Variant]:
        t = call.inputs
        if t.get(table) is None or any(t.get(d) is None for d in data):
            return []
        names = letters(params)
        tshape, dshape = np.shape(t[table]), np.shape(t[data[0]])
        out = []
        reduced = [i for i, (a, b) in enumerate(zip(tshape, dshape)) if a == 1 and b > 1]
        for i in reduced:
            keep = [names[j] for j in reduced if j != i]
            cut = {d: np.asarray(t[d])[(slice(None),) * i + (slice(0, 1),)] for d in data}
            what = "+".join(keep) if keep else "nothing"
            out.append(Variant("reduction", f"summed over {what} only ({names[i]} not reduced)",
                               {"axes": keep}, call._replace(inputs={**t, **cut})))
        return out
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
