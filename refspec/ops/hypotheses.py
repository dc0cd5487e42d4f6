"""What a wrong kernel may have computed instead, as spec calls (docs/compare.md, "Diagnosis").

A hypothesis is a function ``(record, call, params) -> [Variant, ...]``: each variant is the
spec call that a kernel with one particular mistake would match. The comparator evaluates a
variant with the spec itself (``Operator.call``) and reports it where the kernel's output agrees
with it and not with the golden; no formula is written here, only the inputs a mistaken kernel
reads (and, for a mistake in how it writes, an index permutation of what it computed).

``generated`` makes the same hypotheses for every operator from what its record declares: the
letters of each tensor's axes (``Tensor.axes``), how it rotates (``Comparison.rotation``:
which inputs it rotates, its cos and sin tables, the size of a head, where its rotated part
ends). A record adds hypotheses of its own in ``Comparison.hypotheses`` (``refspec.ops.variants``:
a wrong attribute, a statistic over another axis, the bytes of one layout read as another).

The families (each variant's ``kind`` and ``detail``, docs/compare.md "The vocabulary"):

- an input read at the wrong index along the head axis D (``index``; ``head_orders``); the
  rotation partner taken from the wrong place (the cos and sin terms add: the spec with the sin
  table zeroed gives the cos term, with the cos table zeroed the sin term); pairs one off;
- an input read at its first index along an axis only (``index``); positions one off or 0;
- the tables, and any other input: exchanged (``alternative``), one read for the other, left
  out (0) or its factor left out (1) (``input``), a sign flipped (``sign``);
- a reduction over another set of axes (``reduction``): without some of the axes the output is
  summed over (the inputs cut to their first index along those), or over an axis more;
- the rotated part's extent (``extent``, where a part passes through unrotated): its last pair
  or row left unrotated (the tables' identity there: cos 1, sin 0), the whole head rotated.
"""

from __future__ import annotations

from itertools import combinations
from typing import Callable, NamedTuple

import numpy as np

from .head_orders import ORDERS, READS, along_heads, head_maps, heads_after
from .record import Call, TablePart
from .variants import Variant, other_axes, other_values, replaced_inputs, reread_layout

__all__ = ["Variant", "other_values", "other_axes", "reread_layout", "replaced_inputs",
           "generated", "rotation_terms", "GENERATED"]


# --- what the record declares -------------------------------------------------------------------

class _Case(NamedTuple):
    """A call with what the generated families read of its record: the letters of each present
    input's axes (aligned to its last axes; None for an unnamed one), the head size, the
    rotation (or None)."""

    record: object
    call: Call
    params: dict
    letters: dict
    head: int | None
    rotation: object

    @property
    def inputs(self) -> dict:
        return {k: v for k, v in self.call.inputs.items() if v is not None}

    def float_inputs(self) -> list[str]:
        return [t.name for t in self.record.inputs if t.name in self.inputs and not t.is_index]

    def tables(self) -> tuple[TablePart, ...]:
        r = self.rotation
        return () if r is None else (r.cos, r.sin)

    def table_holders(self) -> set[str]:
        return {t.name for t in self.tables()}

    def along_head(self, name: str) -> bool:
        """The input's last axis holds heads' elements (its letter is the head's)."""
        letters = self.letters.get(name)
        return (self.rotation is not None and bool(letters) and letters[-1] == self.rotation.head
                and self.head is not None and np.shape(self.inputs[name])[-1] % self.head == 0)

    def with_inputs(self, **new) -> Call:
        return self.call._replace(inputs={**self.call.inputs, **new})


def _declared(record, call: Call, params: dict) -> _Case:
    rotation = record.comparison.rotation
    letters = {}
    for t in record.inputs:
        arr = call.inputs.get(t.name)
        if arr is None:
            continue
        text = record.input_axes(params, t.name)
        ndim = np.ndim(arr)
        names = list(text[-ndim:]) if text else []
        letters[t.name] = [None] * (ndim - len(names)) + names if names else None
    head = None
    if rotation is not None:
        size = params.get(rotation.head_size) if rotation.head_size else None
        data = [call.inputs.get(n) for n in rotation.data if call.inputs.get(n) is not None]
        head = int(size) if size else (np.shape(data[0])[-1] if data else None)
    return _Case(record, call, params, letters, head, rotation)


# --- the families --------------------------------------------------------------------------------

def _read_at(c: _Case) -> list[Variant]:
    """Each input along the head axis (rotated data, tables) read at the wrong index."""
    out = []
    for name in c.inputs:
        if not c.along_head(name):
            continue
        for how, index in head_maps(c.head).items():
            if how == "halves+pairs":
                continue
            out.append(Variant("index", f"{name} read with {READS[how]} along "
                               f"{c.rotation.head.lower()}", {"input": name, "read": how},
                               c.with_inputs(**{name: along_heads(c.inputs[name], c.head, index)})))
    return out


def _table(c: _Case, part: TablePart, value, base: dict | None = None) -> dict:
    """The inputs with one table (part) replaced by ``value`` (an array of its shape, or a
    number), on top of ``base`` (default: the call's inputs)."""
    inputs = dict(c.inputs if base is None else base)
    arr = np.array(inputs[part.name], copy=True)
    width = arr.shape[-1] // part.chunks
    arr[..., part.chunk * width:(part.chunk + 1) * width] = value
    inputs[part.name] = arr
    return inputs


def _part(c: _Case, part: TablePart) -> np.ndarray:
    arr = np.asarray(c.inputs[part.name])
    width = arr.shape[-1] // part.chunks
    return arr[..., part.chunk * width:(part.chunk + 1) * width]


def rotation_terms(record, call: Call, params: dict) -> tuple[Call, Call, Call] | None:
    """A rotation's two products as spec calls (None: the operator rotates nothing): the cos
    term (the sin table zeroed), the sin term (the cos table zeroed) and what passes through
    (both zeroed); the output is cos term + sin term - what passes through."""
    c = _declared(record, call, params)
    r = c.rotation
    if r is None or not all(p.name in c.inputs for p in c.tables()):
        return None
    return (c.call._replace(inputs=_table(c, r.sin, 0)), c.call._replace(inputs=_table(c, r.cos, 0)),
            c.call._replace(inputs=_table(c, r.sin, 0, _table(c, r.cos, 0))))


def _partners(c: _Case) -> list[Variant]:
    """The rotation partner taken from the wrong place: the cos term as the spec computes it
    (the sin table zeroed) plus the sin term on the input read at ``head_maps`` (the cos table
    zeroed) minus what the latter computes with both tables zeroed (what passes through)."""
    r = c.rotation
    if r is None or not all(p.name in c.inputs for p in c.tables()):
        return []
    cos_term = c.call._replace(inputs=_table(c, r.sin, 0))
    out = []
    for name in r.data:
        if name not in c.inputs or not c.along_head(name):
            continue
        for how, index in head_maps(c.head).items():
            if how in ORDERS:
                continue
            moved = {**c.inputs, name: along_heads(c.inputs[name], c.head, index)}
            sin_term = c.call._replace(inputs=_table(c, r.cos, 0, moved))
            neither = c.call._replace(inputs=_table(c, r.sin, 0, _table(c, r.cos, 0, moved)))
            out.append(Variant("index", f"the rotation partner of {name} taken at the wrong "
                               f"index (the sin term reads {name} with {READS[how]})",
                               {"input": name, "partner": how}, cos_term,
                               ((1.0, sin_term), (-1.0, neither))))
    return out


def _pairs_off(c: _Case) -> list[Variant]:
    """The pairs formed one element off: every input along the head axis read one element
    ahead (or behind), the result written back one element behind (or ahead)."""
    names = [n for n in c.inputs if c.along_head(n)]
    if not names or c.head is None or c.head < 4:
        return []
    maps = head_maps(c.head)
    out = []
    for how, back, text in (("next", "previous", "d + 1 with d + 2"),
                            ("previous", "next", "d - 1 with d")):
        moved = {n: along_heads(c.inputs[n], c.head, maps[how]) for n in names}
        out.append(Variant("index", f"the pairs formed one element off along "
                           f"{c.rotation.head.lower()} ({text})", {"read": f"pairs {how}"},
                           c.with_inputs(**moved),
                           after=heads_after(c.head, maps[back], c.rotation.head, c.record,
                                              c.params)))
    return out


def _tables(c: _Case) -> list[Variant]:
    """cos and sin exchanged, one read for the other, either left out or its factor left out,
    either term's sign flipped."""
    r = c.rotation
    if r is None or not all(p.name in c.inputs for p in c.tables()):
        return []
    cos, sin = _part(c, r.cos).copy(), _part(c, r.sin).copy()
    if cos.shape != sin.shape:
        return []
    both = _table(c, r.sin, cos, _table(c, r.cos, sin))
    out = [Variant("alternative", "cos and sin exchanged",
                   {"param": "inputs", "value": "cos<->sin"}, c.call._replace(inputs=both))]
    for part, other, term, other_term in ((r.cos, sin, "cos", "sin"), (r.sin, cos, "sin", "cos")):
        out += [Variant("input", f"{other_term} read for {term} (both terms take {other_term})",
                        {"input": term, "value": other_term},
                        c.call._replace(inputs=_table(c, part, other))),
                Variant("input", f"the {term} term left out ({term} read as 0)",
                        {"input": term, "value": 0}, c.call._replace(inputs=_table(c, part, 0))),
                Variant("input", f"the {term} factor left out ({term} read as 1)",
                        {"input": term, "value": 1}, c.call._replace(inputs=_table(c, part, 1))),
                Variant("sign", f"the sign of the {term} term flipped", {"term": term},
                        c.call._replace(inputs=_table(c, part, -_part(c, part))))]
    return out


def _operands(c: _Case) -> list[Variant]:
    """Every other float input left out (0), its factor left out (1), its sign flipped, read
    where another input of its shape belongs, exchanged with it."""
    names = [n for n in c.float_inputs() if n not in c.table_holders()]
    out = []
    for name in names:
        arr = np.asarray(c.inputs[name])
        out += [Variant("input", f"{name} left out (read as 0)", {"input": name, "value": 0},
                        c.with_inputs(**{name: np.zeros_like(arr)})),
                Variant("input", f"{name} left out as a factor (read as 1)",
                        {"input": name, "value": 1}, c.with_inputs(**{name: np.ones_like(arr)})),
                Variant("sign", f"the sign of {name} flipped", {"term": name},
                        c.with_inputs(**{name: -arr}))]
    for a, b in combinations(names, 2):
        x, y = c.inputs[a], c.inputs[b]
        if np.shape(x) != np.shape(y) or np.asarray(x).dtype != np.asarray(y).dtype:
            continue
        out += [Variant("alternative", f"{a} and {b} exchanged",
                        {"param": "inputs", "value": f"{a}<->{b}"}, c.with_inputs(**{a: y, b: x})),
                Variant("input", f"{b} read for {a}", {"input": a, "value": b},
                        c.with_inputs(**{a: y})),
                Variant("input", f"{a} read for {b}", {"input": b, "value": a},
                        c.with_inputs(**{b: x}))]
    return out


def _first_index(arr, axis: int) -> np.ndarray:
    a = np.asarray(arr)
    return np.ascontiguousarray(np.broadcast_to(np.take(a, [0], axis=axis), a.shape))


def _first_rows(c: _Case) -> list[Variant]:
    """Each input read at its first index along one named axis only (not the head axis), and
    at its first row only (every axis but the last)."""
    head = c.rotation.head if c.rotation is not None else None
    out = []
    for name in c.float_inputs():
        letters, arr = c.letters.get(name), np.asarray(c.inputs[name])
        if not letters or arr.ndim < 2:
            continue
        axes = [i for i, letter in enumerate(letters)
                if letter not in (None, head) and arr.shape[i] > 1 and i < arr.ndim - 1]
        for i in axes:
            low = letters[i].lower()
            out.append(Variant("index", f"{name} read at its first {low} only ({low} = 0 for "
                               f"every {low})", {"input": name, "read": f"first {letters[i]}"},
                               c.with_inputs(**{name: _first_index(arr, i)})))
        if len(axes) > 1:
            first = arr
            for i in axes:
                first = _first_index(first, i)
            out.append(Variant("index", f"{name} read at its first row only",
                               {"input": name, "read": "first row"}, c.with_inputs(**{name: first})))
    return out + _tables_first(c)


def _tables_first(c: _Case) -> list[Variant]:
    """The cos and sin tables (held apart) both read at their first index along one named axis
    (not the head's), and at their first row (a zero stride for every position)."""
    r = c.rotation
    if r is None or r.cos.name == r.sin.name or not all(p.name in c.inputs for p in c.tables()):
        return []
    cos, sin = np.asarray(c.inputs[r.cos.name]), np.asarray(c.inputs[r.sin.name])
    letters = c.letters.get(r.cos.name)
    if not letters or cos.shape != sin.shape or cos.ndim < 2:
        return []
    axes = [i for i, x in enumerate(letters[:-1]) if x not in (None, r.head) and cos.shape[i] > 1]
    reads = [(f"first {letters[i]}", (i,)) for i in axes]
    if len(axes) > 1:
        reads.append(("first row", tuple(axes)))
    out = []
    for read, cut in reads:
        a, b = cos, sin
        for i in cut:
            a, b = _first_index(a, i), _first_index(b, i)
        out.append(Variant("index", f"{r.cos.name} and {r.sin.name} read at their {read} only",
                           {"input": r.cos.name, "and": r.sin.name, "read": read},
                           c.with_inputs(**{r.cos.name: a, r.sin.name: b})))
    return out


def _sizes(c: _Case) -> dict:
    """The largest size of each letter among the inputs (its size where not broadcast)."""
    out = {}
    for name, letters in c.letters.items():
        for letter, size in zip(letters or (), np.shape(c.inputs[name])):
            if letter is not None:
                out[letter] = max(out.get(letter, 1), size)
    return out


def _reduced_letters(c: _Case) -> list[str]:
    """The letters an output is summed over: broadcast in some input (size 1 where another
    input has more), or absent from some output's axes."""
    sizes = _sizes(c)
    found = []
    for name, letters in c.letters.items():
        for letter, size in zip(letters or (), np.shape(c.inputs[name])):
            if letter is not None and size == 1 and sizes[letter] > 1 and letter not in found:
                found.append(letter)
    for o in c.record.outputs:
        text = c.record.output_axes(c.params, o.name)
        found += [x for x in sizes if text and x not in text and sizes[x] > 1 and x not in found]
    return found


def _cut(c: _Case, letters, keep_tables: bool = False) -> dict:
    """The inputs cut to their first index along ``letters`` (where larger than 1)."""
    out = dict(c.inputs)
    for name, names in c.letters.items():
        if not names or (keep_tables and name in c.table_holders()):
            continue
        arr = np.asarray(out[name])
        for i, letter in enumerate(names):
            if letter in letters and arr.shape[i] > 1:
                arr = np.take(arr, [0], axis=i)
        out[name] = arr
    return out


def _reductions(c: _Case) -> list[Variant]:
    """A reduction over another set of axes: without some of those it sums over (every proper
    subset), or over one of the tables' own axes too (the result broadcast back)."""
    reduced = _reduced_letters(c)
    out = []
    for n in range(len(reduced)):
        for kept in combinations(reduced, n):
            skipped = [x for x in reduced if x not in kept]
            what = (f"summed over {'+'.join(kept)} only" if kept else "not summed")
            out.append(Variant("reduction", f"{what} ({'+'.join(skipped)} not reduced)",
                               {"axes": list(kept)}, c.with_inputs(**_cut(c, skipped))))
    head = c.rotation.head if c.rotation is not None else None
    sizes = _sizes(c)
    for letter in [x for x in sizes if x not in reduced and x != head and sizes[x] > 1]:
        cut = {p.name: np.take(np.asarray(c.inputs[p.name]), [0], axis=c.letters[p.name].index(letter))
               for p in c.tables() if p.name in c.inputs and c.letters.get(p.name)
               and letter in c.letters[p.name]}
        if cut and reduced:
            out.append(Variant("reduction", f"summed over {letter} too ({'+'.join(reduced)}+"
                               f"{letter})", {"axes": reduced + [letter]}, c.with_inputs(**cut),
                               after=_broadcast_after(c, letter, sizes[letter])))
    return out


def _broadcast_after(c: _Case, letter: str, size: int) -> Callable:
    """``after`` of a reduction over ``letter`` too: a reduced output (size 1 along it)
    broadcast back; None for the others (for them the variant is no reduction)."""
    def after(name: str, value: np.ndarray) -> np.ndarray | None:
        text = c.record.output_axes(c.params, name)
        if not text or letter not in text[-np.ndim(value):]:
            return None
        axis = text[-np.ndim(value):].index(letter)
        return np.repeat(value, size, axis=axis) if np.shape(value)[axis] == 1 else None
    return after


def _extent(c: _Case) -> list[Variant]:
    """Where a part passes through unrotated: the rotated part's last pair (or row) left
    unrotated (cos 1, sin 0 there), and, along the head, the whole head rotated (the tables
    extended to it with cos 1, sin 0)."""
    r = c.rotation
    if r is None or r.extent_axis is None or not all(p.name in c.inputs for p in c.tables()):
        return []
    cos, sin = _part(c, r.cos), _part(c, r.sin)
    axis = r.extent_axis % cos.ndim
    last = (slice(None),) * axis + (slice(-1, None),)
    cos1, sin0 = np.array(cos, copy=True), np.array(sin, copy=True)
    cos1[last], sin0[last] = 1, 0
    unit = "pair" if r.extent_axis == -1 else "row"
    out = [Variant("extent", f"the rotated part's last {unit} left unrotated (one {unit} short)",
                   {"extent": "one short"},
                   c.call._replace(inputs=_table(c, r.sin, sin0, _table(c, r.cos, cos1))))]
    holder = np.asarray(c.inputs[r.cos.name])
    if r.extent_axis == -1 and r.cos.name == r.sin.name and c.head and \
            c.head > holder.shape[-1] and c.head % holder.shape[-1] == 0:
        grow = cos.shape[-1] * (c.head // holder.shape[-1] - 1)
        pad = [(0, 0)] * (cos.ndim - 1) + [(0, grow)]
        wide = np.concatenate([np.pad(cos, pad, constant_values=1),
                               np.pad(sin, pad, constant_values=0)], axis=-1).astype(holder.dtype)
        out.append(Variant("extent", "the whole head rotated (rotary_dim taken as the head "
                           "size)", {"extent": "whole head"}, c.with_inputs(**{r.cos.name: wide})))
    return out


def _index_inputs(c: _Case) -> list[Variant]:
    """Integer inputs (positions) one ahead, one behind (within the values they hold), all 0,
    at their first row only (an input of several rows)."""
    out = []
    for t in c.record.inputs:
        arr = c.inputs.get(t.name)
        if arr is None or not t.is_index:
            continue
        a = np.asarray(arr)
        lo, hi = (int(a.min()), int(a.max())) if a.size else (0, 0)
        first = a
        for i in range(a.ndim - 1):                 # (several rows: their first row only)
            first = _first_index(first, i)
        for text, value in (("one ahead (+1)", np.minimum(a + 1, hi)),
                            ("one behind (-1)", np.maximum(a - 1, lo)),
                            ("all 0", np.zeros_like(a)), ("read at its first row only", first)):
            if a.ndim > 1 or value is not first:
                out.append(Variant("index", f"{t.name} {text}", {"input": t.name, "read": text},
                                   c.with_inputs(**{t.name: value.astype(a.dtype)})))
    return out


def _family(make: Callable[[_Case], list]) -> Callable:
    """A generated family as a hypothesis ``(record, call, params) -> [Variant]``."""
    def variants(record, call: Call, params: dict) -> list[Variant]:
        return make(_declared(record, call, params))
    variants.__name__ = variants.__qualname__ = make.__name__.lstrip("_")
    variants.__doc__ = make.__doc__
    return variants


#: the generated families as hypotheses, in the order they are tried (the likely first)
GENERATED = tuple(_family(f) for f in (_tables, _reductions, _read_at, _partners, _pairs_off,
                                       _operands, _first_rows, _extent, _index_inputs))


def generated(record, call: Call, params: dict) -> list[Variant]:
    """Every generated variant of a call (the module docstring), the same families for every
    operator, read from the record's declarations."""
    return [v for family in GENERATED for v in family(record, call, params)]
