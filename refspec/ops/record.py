"""The operator record: everything the layers above the spec need to know about one operator,
as plain data (docs/architecture.md, "The operator record").

A record has its names (``id``, the one name of the operator in case ids, files, reports and
the command line; ``aclnn``; ``title``; the spec function, whose name is ``function``) and five
small parts: ``tensors`` (inputs and outputs with their vendor file names), ``sweep`` (the axes
of its cases), ``generation`` (how a case's inputs are planned and sampled, how its arguments
are validated, its tolerance terms), ``comparison`` (what the comparator needs beyond the
golden file) and ``autograd`` (how a backward case is reproduced from its forward). The
callables that act on one call of the spec function take a ``Call``.
"""

from __future__ import annotations

import inspect
import re
import string
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Callable, Mapping, NamedTuple

import numpy as np

from ..spec.dtypes import bfloat16, dtype_name, resolve_dtype
from ..spec.errors import AclnnError
from ..spec.quant_dtypes import is_quant_dtype
from .axes import Axis, Shape

__all__ = ["Call", "Tensor", "Output", "TensorPlan", "Tensors", "SweepAxes", "Generation",
           "TablePart", "Rotation", "Comparison", "Autograd", "Operator", "camel_case",
           "stand_ins", "check_names", "filled"]


class Call(NamedTuple):
    """One call of a spec function: its tensors by parameter name (absent ones left out or
    None), its attribute keywords and the chip profile."""

    inputs: dict
    attrs: dict
    soc: str | None = None


@dataclass(frozen=True)
class Tensor:
    """An input: the spec function's parameter ``name``, its aclnn parameter name (the stem of
    its vendor file, e.g. ``gradQueryOutput.bin``) and its sampling ``role``: data, grad,
    weight, bias (drawn), table (cos/sin drawn together), stats (derived from other inputs),
    index (integers the record plans: positions, cache slots), cache (a cache updated in place,
    holding sentinel values; its dtype may be an 8-bit one), scale (quantisation parameters
    the record draws). ``axes``: the letters of its axes, a template
    filled in from the case parameters like an output's (``"{layout}"``; a letter names the
    same axis in every tensor, a tensor of size 1 along it is broadcast there), naming its last
    axes when it has more axes than letters; "" when unnamed."""

    name: str
    aclnn: str
    role: str
    axes: str = ""

    @property
    def is_index(self) -> bool:
        """An integer tensor (its dtype is not the case's dtype)."""
        return self.role == "index"

    def allows(self, dtype) -> bool:
        """Whether a file or dump may hold this tensor in ``dtype``: an integer dtype for an
        index tensor, a float one otherwise (the spec's checks judge the rest)."""
        kind = np.dtype(dtype).kind
        if self.role == "cache" and is_quant_dtype(dtype):
            return True
        return kind in "iu" if self.is_index else (kind == "f" or np.dtype(dtype) == bfloat16)


@dataclass(frozen=True)
class Output:
    """An output: its name in the spec's result, its aclnn name, its dtype (None: the
    operator's, its primary input's; or a fixed one such as ``"float32"``), the letters of
    its axes, a template filled in from the case parameters (``"{layout}"``) or a function of
    them (a cache's axes by its cache mode), and its role:
    ``"stats"`` for statistics a forward returns for its backward (NormRopeConcat's training
    mean/rstd), which a Python implementation may leave out (``refspec run`` then says it
    returned none and judges the rest), "" for every other output. ``in_place``: the output
    is the input of the same name updated in place (a KV cache): it has that input's dtype and
    vendor file, which the kernel updates."""

    name: str
    aclnn: str
    dtype: str | None = None
    axes: str | Callable = ""
    role: str = ""
    in_place: bool = False


class TensorPlan(NamedTuple):
    """One input of a case as planned: shape, dtype and sampling role."""

    shape: tuple
    dtype: np.dtype
    role: str


@dataclass(frozen=True)
class Tensors:
    """The tensors of an operator, in the spec function's order, the aclnn spellings that
    vendor files shorten (``xOptional`` -> the file stem ``x``), and ``dtype_from``: the input
    whose dtype is the case's (None: the first input that is not an index; DequantRopeQuantKvcache
    names cos, as its x may be int32 to dequantise)."""

    inputs: tuple[Tensor, ...]
    outputs: tuple[Output, ...]
    aliases: Mapping[str, str] = field(default_factory=dict)
    dtype_from: str | None = None


def _no_names(values: dict) -> dict:
    return {}


def _same(values: dict) -> dict:
    return values


def _any(values: dict) -> bool:
    return True


def _no_check(axes: dict, given: set) -> None:
    return None


@dataclass(frozen=True)
class SweepAxes:
    """How sweep files describe this operator's cases (docs/sweeps.md). ``axes`` in case-id
    order (the shape comes last); ``shape`` its sizes. The callables take a case's values (axis
    values and sizes, by name): ``complete`` fills in what depends on other values (a size
    given as a symbol, T of a TND layout); ``derived`` gives further names constraints may use;
    ``admits`` drops combinations that name no case; ``check(axes, given)`` rejects
    (ValueError) axis values a block names that could never name a case."""

    axes: tuple[Axis, ...]
    shape: Shape
    complete: Callable[[dict], dict] = _same
    derived: Callable[[dict], dict] = _no_names
    derived_names: tuple[str, ...] = ()
    admits: Callable[[dict], bool] = _any
    check: Callable[[dict, set], None] = _no_check

    def axis(self, name: str) -> Axis:
        return next(a for a in self.axes if a.name == name)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(a.name for a in self.axes)


@dataclass(frozen=True)
class Generation:
    """Making a case: ``plan(params)`` the inputs' shapes, dtypes and roles (absent inputs left
    out, a negative case's fault applied); ``sample(params, seed, pool)`` the inputs as stored
    (``pool``, an executor, may draw tensors side by side); ``check(call)`` the validation
    alone, no arithmetic (raises the spec's AclnnError); ``terms(call)`` each output's
    ``refspec.spec.terms.OutputTerms``; ``describe(call)`` the parameters its tensors decide
    (a layout, a cos/sin pattern); ``socs`` the chip profiles whose rules it has (None: the
    math-only profile)."""

    plan: Callable[[dict], dict]
    sample: Callable[[dict, int, Any], dict]
    check: Callable[[Call], None]
    terms: Callable[[Call], dict]
    socs: tuple = ("A2", "A3", "950", None)
    describe: Callable[[Call], dict] = lambda call: {}


class TablePart(NamedTuple):
    """A rotation table: the input ``name`` whole, or part ``chunk`` of ``chunks`` equal parts
    of its last axis (RopeWithSinCosCache's cache: each row holds the cos values, then the
    sin values)."""

    name: str
    chunk: int = 0
    chunks: int = 1


@dataclass(frozen=True)
class Rotation:
    """How an operator rotates, as data for the hypotheses the diagnosis generates
    (``refspec.ops.hypotheses.generated``): the inputs it rotates (``data``: their last axis
    holds the heads' elements, axis letter ``head``), the tables of its cos and sin terms
    (``y = x*cos + rot(x)*sin``: the terms add, so the sin table zeroed leaves the cos term);
    ``head_size`` the case parameter that gives one head's size when the last axis holds
    several heads (None: it is one head); ``extent_axis`` the tables' axis along which the
    rotated part ends and the rest passes through unrotated (RopeWithSinCosCache's rotary_dim
    columns: -1; NormRopeConcat's Sr rows: 0; None: everything is rotated)."""

    data: tuple[str, ...]
    cos: TablePart
    sin: TablePart
    head: str = "D"
    head_size: str | None = None
    extent_axis: int | None = None


@dataclass(frozen=True)
class Comparison:
    """What the comparator asks of an operator: the parameters shown in the context of its
    messages, its msprobe accuracy level (the ratio standard's thresholds), the
    same-precision float32 kernel of the ratio standard (``benchmark(call)``: {output: float32
    result}), if it has one, ``unattainable(call)`` (below), and the ``hypotheses`` of its own
    the diagnosis of a failing output tries besides those it generates for every operator
    from the tensors' declarations (``refspec.ops.hypotheses``: what a kernel with one
    particular mistake computes, each a function ``(record, call, params) -> [Variant]``);
    ``independent`` the axis letters along which each index is computed on its own (a batch, a
    head, a token: a slice of a case along them is a case of its own, on which the diagnosis
    evaluates its hypotheses), ``rotation`` how it rotates (None: it does not)."""

    context: tuple[str, ...] = ("dtype",)
    ratio_level: str = "L0"
    benchmark: Callable[[Call], dict] | None = None
    #: why a kernel computing the documented dataflow in its own arithmetic (float32 for the
    #: device dtypes) cannot attain a call's goldens, "" when it can (None: it always can)
    unattainable: Callable[[Call], str] | None = None
    hypotheses: tuple[Callable, ...] = ()
    independent: tuple[str, ...] = ()
    rotation: Rotation | None = None


class Autograd(NamedTuple):
    """How a backward case is reproduced by automatic differentiation of its forward: call the
    forward operator ``forward`` (a record id) on ``inputs`` with ``attrs``, feed the backward
    case's upstream gradients to ``backward()`` (``upstream``: forward output name -> the
    backward input that holds its gradient), and read each backward output as the gradient of a
    forward input (``leaves``: forward input name -> backward output name). Forward inputs the
    backward case does not store (NormRopeConcat's value and biases, RoPE's x when absent) are
    zeros of their shape: the gradients do not depend on them. ``saved``: forward outputs that
    the backward takes as inputs (NormRopeConcat's mean and rstd; forward output name ->
    backward input name): the forward's own values of them are what its autograd backward
    uses, so the reference is the backward at those values."""

    forward: str
    inputs: dict
    attrs: dict
    leaves: dict
    upstream: dict
    saved: dict = {}


def camel_case(name: str) -> str:
    """``grad_query_output`` -> ``gradQueryOutput``: the aclnn spelling of a spec name."""
    head, *rest = name.split("_")
    return head + "".join(p[:1].upper() + p[1:] for p in rest)


#: the spec keywords that are no attribute: chip profile, output dtype, a diagnosis's arithmetic
NOT_ATTRIBUTES = ("soc", "out_dtype", "sum_dtype", "norm_axis")


class _Blank(dict):
    def __missing__(self, key):
        return ""


@dataclass(frozen=True)
class Operator:
    """One operator (see the module docstring)."""

    id: str
    aclnn: str
    title: str
    spec: Callable
    tensors: Tensors
    sweep: SweepAxes
    generation: Generation
    comparison: Comparison = Comparison()
    #: (Call of a backward case, its parameters) -> ``Autograd``; None for a forward operator
    autograd: Callable[[Call, dict], Autograd] | None = None

    # --- names -------------------------------------------------------------------------------
    @property
    def function(self) -> str:
        """The spec function's name."""
        return self.spec.__name__

    @property
    def names(self) -> tuple[str, str, str]:
        """The three names it may be given by: id, spec function, aclnn API."""
        return self.id, self.function, self.aclnn

    @property
    def inputs(self) -> tuple[Tensor, ...]:
        return self.tensors.inputs

    @property
    def outputs(self) -> tuple[Output, ...]:
        return self.tensors.outputs

    @property
    def input_names(self) -> tuple[str, ...]:
        return tuple(t.name for t in self.inputs)

    @property
    def output_names(self) -> tuple[str, ...]:
        return tuple(o.name for o in self.outputs)

    @cached_property
    def attributes(self) -> tuple[str, ...]:
        """The spec function's parameters that are neither tensors nor ``NOT_ATTRIBUTES``."""
        params = inspect.signature(self.spec).parameters
        return tuple(p for p in params if p not in self.input_names + NOT_ATTRIBUTES)

    @property
    def socs(self) -> tuple:
        """The chip profiles it has (None: the math-only one)."""
        return self.generation.socs

    # --- files -------------------------------------------------------------------------------
    @cached_property
    def _table(self) -> dict:
        """spec name -> aclnn name of every tensor (made once per record)."""
        return {**{t.name: t.aclnn for t in self.inputs}, **{o.name: o.aclnn for o in self.outputs}}

    def aclnn_name(self, name: str) -> str:
        """The aclnn (vendor file) name of a tensor; unknown names are camel-cased."""
        table = self._table
        return table[name] if name in table else camel_case(name)

    def python_name(self, name: str) -> str:
        """The spec's name of an aclnn (vendor file) name; spec names are returned unchanged."""
        name = self.tensors.aliases.get(name, name)
        table = self._table
        if name in table:
            return name
        for py, acl in table.items():
            if acl == name:
                return py
        raise KeyError(f"unknown tensor name {name!r} for {self.function}")

    def file_stems(self, name: str) -> list[str]:
        """The file stems a tensor may be written under: the aclnn name, the spec's name, and
        the aclnn spellings with suffixes (``dxOut``)."""
        stems = list(dict.fromkeys((self.aclnn_name(name), name)))
        stems += [alias for alias, stem in self.tensors.aliases.items()
                  if stem in stems and alias not in stems]
        return stems

    def tensor_file(self, name: str, ext: str = "bin") -> str:
        """``dy.bin``, ``gradQueryOutput.bin``: the file an input is exported to and the file
        a kernel harness writes an output to."""
        return f"{self.aclnn_name(name)}.{ext}"

    def golden_file(self, name: str, ext: str = "bin") -> str:
        """``golden_dx.bin``, ``golden_gradQuery.bin``: the file an expected output goes to."""
        return f"golden_{self.aclnn_name(name)}.{ext}"

    def output_axes(self, params: dict, name: str) -> str:
        """The axis letters of an output of a case (its template filled in)."""
        return filled(next((o.axes for o in self.outputs if o.name == name), ""), params)

    def input_axes(self, params: dict, name: str) -> str:
        """The axis letters of an input of a case (its template filled in)."""
        return filled(next((t.axes for t in self.inputs if t.name == name), ""), params)

    def output_dtype(self, name: str, dtype, inputs: dict | None = None) -> np.dtype:
        """The dtype an output is stored in, for a case of ``dtype`` (an output updated in place:
        the dtype of its input in ``inputs``)."""
        out = next((o for o in self.outputs if o.name == name), None)
        if out is not None and out.in_place and inputs is not None:
            return np.asarray(inputs[name]).dtype
        return resolve_dtype((out.dtype if out else None) or dtype)

    @property
    def in_place(self) -> tuple[str, ...]:
        """The outputs that are inputs updated in place."""
        return tuple(o.name for o in self.outputs if o.in_place)

    # --- parameters and the spec's arguments ---------------------------------------------------
    def attrs_of(self, params: dict) -> dict:
        """The spec function's attribute keywords of a case: each axis that sets one, its value
        converted (``mode="half"`` -> ``RopeMode.HALF``)."""
        return {a.attr: a.to_spec(params[a.name]) for a in self.sweep.axes
                if a.attr is not None and a.name in params}

    def call_of(self, params: dict, inputs: dict) -> Call:
        """The spec call of a case: its inputs, its attributes and its profile."""
        return Call(inputs, self.attrs_of(params), params.get("soc"))

    def axis_values(self, attrs: dict) -> dict:
        """Attribute values (the spec's, or any spelling their axes read: ``"half"``, 0) as the
        case parameters hold them, by axis name; a value its axis does not read is kept as it
        is (the spec decides whether a call with it is rejected)."""
        out = {}
        for a in self.sweep.axes:
            if a.attr is not None and a.attr in attrs:
                out[a.name] = _read(a, attrs[a.attr])
        return out

    def spec_attrs(self, attrs: dict) -> dict:
        """Attribute values in any spelling their axes read (``rotary_mode="half"``,
        ``mrope_section=[16, 24, 24]``) as the spec function takes them; ValueError for a string
        or list no axis reads."""
        by_attr = {a.attr: a for a in self.sweep.axes if a.attr is not None}
        out = {}
        for k, v in attrs.items():
            axis = by_attr.get(k)
            if axis is not None and isinstance(v, (str, list, tuple)):
                try:
                    v = axis.parse(v)
                except ValueError as exc:
                    raise ValueError(f"{k}: {exc}") from None
            out[k] = axis.to_spec(_read(axis, v)) if axis is not None else v
        return out

    def params_of(self, call: Call) -> dict:
        """The parameters that name a call (an in-memory case, a dump's call, a case folder):
        each attribute as its axis stores it, what the tensors decide, the profile and dtype."""
        tensors = {k: v for k, v in call.inputs.items() if v is not None}
        primary = next((tensors[t.name] for t in self.inputs if t.name in tensors
                        and (t.name == self.tensors.dtype_from if self.tensors.dtype_from
                             else not t.is_index)), None)
        dtype = None if primary is None else dtype_name(getattr(primary, "dtype", None)
                                                        or np.asarray(primary).dtype)
        attrs = self.complete_attrs(call.attrs)
        return {"op": self.id, **self.axis_values(attrs),
                **self.describe_shapes(tensors, attrs, call.soc), "soc": call.soc, "dtype": dtype}

    def upgrade_params(self, params: dict) -> dict:
        """Parameters as a golden file of schema 1 or an older case.json stored them, under the
        axes' names and in their canonical values (``cos_pattern`` -> ``cos``, mode 0 with
        ``mode_name`` "half" -> mode "half"); an axis they lack whose default is left out of
        case ids (``fault=none``, NormRopeConcatBackward's ``eps``, added later) has that
        default, the value every case had before the axis."""
        out = dict(params)
        for a in self.sweep.axes:
            if a.legacy is not None and a.legacy in out:
                out[a.name] = out.pop(a.legacy)
            if a.name in out:
                out[a.name] = _read(a, out[a.name])
            elif a.default == (a.omit,):
                out[a.name] = a.omit
        return out

    def complete_attrs(self, attrs: dict) -> dict:
        """``attrs`` with every attribute the caller left out at the spec function's default."""
        params = inspect.signature(self.spec).parameters
        return {a: attrs[a] if a in attrs else params[a].default for a in self.attributes}

    def call(self, call: Call, out_dtype=None, **keywords) -> dict:
        """The spec function on a call (every tensor parameter passed, None when absent, and
        ``keywords``, e.g. ``whole_caches``): {output name: value} of the outputs it produces."""
        args = {t.name: call.inputs.get(t.name) for t in self.inputs}
        result = self.spec(**args, **call.attrs, **keywords, soc=call.soc, out_dtype=out_dtype)
        values = result if isinstance(result, tuple) else (result,)
        return {o.name: v for o, v in zip(self.outputs, values) if v is not None}

    def probe(self, params: dict):
        """The error the case's profile raises for its planned arguments, found without
        computing anything (zero-stride arrays of the planned shapes and dtypes), or None."""
        try:
            self.generation.check(self.call_of(params, stand_ins(self.generation.plan(params))))
        except AclnnError as exc:
            return exc
        return None

    def describe_shapes(self, tensors: dict, attrs: dict, soc) -> dict:
        """``generation.describe`` for tensors known by shape and dtype only (files not yet
        read); {} where the validation rejects them (it names what is wrong when the case is
        computed)."""
        try:
            return self.generation.describe(Call(stand_ins(tensors), attrs, soc))
        except (AclnnError, KeyError, ValueError, TypeError):
            return {}

    def __repr__(self) -> str:
        return f"<Operator {self.id}: {self.function} ({self.aclnn})>"


def filled(template, params: dict) -> str:
    """An axes template filled in from the case parameters (absent ones empty), or called."""
    if callable(template):
        return template(params)
    return string.Formatter().vformat(template, (), _Blank(params))


def _read(axis: Axis, value):
    """The axis's value of ``value``, or ``value`` itself when the axis does not read it."""
    try:
        return axis.parse(value)
    except ValueError:
        return value


def stand_ins(tensors: dict) -> dict:
    """Zero-stride zero arrays of each tensor's shape and dtype (anything with ``shape`` and
    ``dtype``): what validation looks at, without memory for the values."""
    return {k: np.broadcast_to(np.zeros((), t.dtype), t.shape) for k, t in tensors.items()}


def check_names(op: Operator) -> None:
    """Reject a record whose ids could not appear in case ids and sweep files."""
    if not re.fullmatch(r"[a-z][a-z0-9_]*", op.id):
        raise ValueError(f"operator id {op.id!r} must be lower case letters, digits and _")
