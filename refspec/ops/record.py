"""The operator record: everything the layers above the spec need to know about one operator,
as plain data (docs/architecture.md, "The operator record").

A record names the operator three ways (its short id in case ids, the spec function, the aclnn
API), lists its tensors with their vendor file names and sampling roles, its outputs, the sweep
axes of its cases, the chip profiles it has, and the few functions that differ between
operators: how a case's inputs are planned and sampled, how the spec function is called, how its
arguments are validated, and which tolerance terms its outputs get. The sweep parser, the
generator, the exporter, the reader, the comparator and the command line consult records; none
of them branches on an operator's name.
"""

from __future__ import annotations

import inspect
import re
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Callable, Mapping, NamedTuple

import numpy as np

from ..spec.dtypes import resolve_dtype
from ..spec.errors import AclnnError

__all__ = ["Tensor", "Output", "TensorPlan", "SweepAxes", "Autograd", "Operator", "camel_case"]


@dataclass(frozen=True)
class Tensor:
    """An input: the spec function's parameter ``name``, its aclnn parameter name (the stem of
    its vendor file, e.g. ``gradQueryOutput.bin``) and its sampling ``role``: data, grad,
    weight, bias (drawn), table (cos/sin drawn together), stats (derived from other inputs)."""

    name: str
    aclnn: str
    role: str


@dataclass(frozen=True)
class Output:
    """An output: its name in the spec's result, its aclnn name, and its dtype: ``None`` for
    the operator's dtype (its primary input's), or a fixed one such as ``"float32"``."""

    name: str
    aclnn: str
    dtype: str | None = None


class TensorPlan(NamedTuple):
    """One input of a case as planned: shape, dtype and sampling role."""

    shape: tuple
    dtype: np.dtype
    role: str


@dataclass(frozen=True)
class SweepAxes:
    """How sweep files describe this operator's cases (docs/sweeps.md).

    ``axes``: the axis names in case-id order (``shape`` always comes last); ``shape_keys`` the
    sizes of a shape value, ``shape_defaults`` those that may be left out; ``faults`` the
    deliberate argument defects a ``fault`` axis may name; ``params(values, shape)`` the
    canonical parameters of a case; ``label(shape)`` the shape part of its id;
    ``derived(values, shape)`` further names constraints may use (e.g. T = ``B*S``);
    ``complete(values, shape)`` fills in sizes that depend on other axes; ``admits(values)``
    drops value combinations that name no case; ``check_axes(axes, given)`` rejects (ValueError)
    axis values given in the file that could never name a case; ``defaults`` are axis values
    when a block gives none (beyond the common ones); ``filters`` maps the ``--mode``/``--layout``
    filters to parameter names.
    """

    axes: tuple[str, ...]
    shape_keys: tuple[str, ...]
    shape_example: str
    params: Callable[[dict, dict], dict]
    label: Callable[[dict], str]
    shape_defaults: Mapping[str, Any] = field(default_factory=dict)
    faults: tuple[str, ...] = ("none",)
    derived: Callable[[dict, dict], dict] = lambda values, shape: {}
    derived_names: tuple[str, ...] = ()
    complete: Callable[[dict, dict], dict] = lambda values, shape: shape
    admits: Callable[[dict], bool] = lambda values: True
    check_axes: Callable[[dict, set], None] = lambda axes, given: None
    defaults: Mapping[str, list] = field(default_factory=dict)
    filters: Mapping[str, str] = field(default_factory=dict)


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


@dataclass(frozen=True)
class Operator:
    """One operator (see the module docstring). The callables take the spec function's
    arguments as ``inputs`` (tensor name -> array, absent ones left out) and ``attrs`` (its
    attribute keywords), plus the chip profile ``soc``."""

    id: str
    function: str
    aclnn: str
    title: str
    spec: Callable
    inputs: tuple[Tensor, ...]
    outputs: tuple[Output, ...]
    attributes: tuple[str, ...]
    socs: tuple[str | None, ...]
    sweep: SweepAxes
    #: case parameters -> the spec function's attribute keywords
    attrs_of: Callable[[dict], dict]
    #: case parameters -> {input name: TensorPlan} (absent inputs left out, faults applied)
    plan: Callable[[dict], dict]
    #: (case parameters, seed, pool=None) -> {input name: array}, as stored; ``pool`` (an
    #: executor) may draw tensors side by side
    sample: Callable[..., dict]
    #: validation alone, no arithmetic: raises the spec's AclnnError
    check: Callable[[dict, dict, Any], None]
    #: {output name: refspec.spec.terms.OutputTerms}
    terms: Callable[[dict, dict, Any], dict]
    #: (case parameters, output name) -> axis letters for naming elements
    output_axes: Callable[[dict, str], str]
    #: (inputs, attrs, soc) -> the parameters that name an in-memory case (layout, ...)
    describe: Callable[[dict, dict, Any], dict] = lambda inputs, attrs, soc: {}
    #: parameters shown in the context of messages
    context: tuple[str, ...] = ("dtype",)
    #: msprobe accuracy level of the operator (the ratio standard's thresholds)
    ratio_level: str = "L0"
    #: (inputs, attrs, soc) -> {output: float32 result} of a same-precision float32 kernel, or None
    benchmark: Callable | None = None
    #: (inputs, attrs, soc, names) -> {output: S} for elementwise outputs, or None
    elementwise_sum_abs: Callable | None = None
    #: aclnn spellings that vendor files shorten -> the file stem (xOptional -> x)
    file_aliases: Mapping[str, str] = field(default_factory=dict)
    #: (inputs, attrs) of a backward case -> ``Autograd``; None for a forward operator
    autograd: Callable[[dict, dict], Autograd] | None = None

    # --- names -------------------------------------------------------------------------------
    @property
    def names(self) -> tuple[str, str, str]:
        """The three names: short id, spec function, aclnn API."""
        return self.id, self.function, self.aclnn

    @property
    def input_names(self) -> tuple[str, ...]:
        return tuple(t.name for t in self.inputs)

    @property
    def output_names(self) -> tuple[str, ...]:
        return tuple(o.name for o in self.outputs)

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
        name = self.file_aliases.get(name, name)
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
        stems += [alias for alias, stem in self.file_aliases.items()
                  if stem in stems and alias not in stems]
        return stems

    def input_file(self, name: str, ext: str = "bin") -> str:
        """``dy.bin``, ``gradQueryOutput.bin``: the file an input is exported to."""
        return f"{self.aclnn_name(name)}.{ext}"

    def golden_file(self, name: str, ext: str = "bin") -> str:
        """``golden_dx.bin``, ``golden_gradQuery.bin``: the file an expected output goes to."""
        return f"golden_{self.aclnn_name(name)}.{ext}"

    def output_file(self, name: str, ext: str = "bin") -> str:
        """``dx.bin``, ``gradQuery.bin``: the file a kernel harness writes an output to."""
        return f"{self.aclnn_name(name)}.{ext}"

    # --- calling the spec --------------------------------------------------------------------
    def call(self, inputs: dict, attrs: dict, soc=None, out_dtype=None) -> dict:
        """The spec function on ``inputs`` (every tensor parameter passed, None when absent):
        {output name: array} of the outputs it produces."""
        args = {t.name: inputs.get(t.name) for t in self.inputs}
        result = self.spec(**args, **attrs, soc=soc, out_dtype=out_dtype)
        values = result if isinstance(result, tuple) else (result,)
        return {o.name: v for o, v in zip(self.outputs, values) if v is not None}

    def complete_attrs(self, attrs: dict) -> dict:
        """``attrs`` with every attribute the caller left out at the spec function's default."""
        params = inspect.signature(self.spec).parameters
        return {a: attrs[a] if a in attrs else params[a].default for a in self.attributes}

    def output_dtype(self, name: str, dtype) -> np.dtype:
        """The dtype an output is stored in, for a case of ``dtype``."""
        fixed = next((o.dtype for o in self.outputs if o.name == name), None)
        return resolve_dtype(fixed or dtype)

    def probe(self, params: dict):
        """The error the case's profile raises for its planned arguments, found without
        computing anything (zero-stride arrays of the planned shapes and dtypes), or None."""
        try:
            self.check(stand_ins(self.plan(params)), self.attrs_of(params), params.get("soc"))
        except AclnnError as exc:
            return exc
        return None

    def describe_shapes(self, tensors: dict, attrs: dict, soc) -> dict:
        """``describe`` for tensors known by shape and dtype only (files not yet read); {}
        where the validation rejects them (it names what is wrong when the case is computed)."""
        try:
            return self.describe(stand_ins(tensors), attrs, soc)
        except (AclnnError, KeyError, ValueError, TypeError):
            return {}

    def __repr__(self) -> str:
        return f"<Operator {self.id}: {self.function} ({self.aclnn})>"


def stand_ins(tensors: dict) -> dict:
    """Zero-stride zero arrays of each tensor's shape and dtype (anything with ``shape`` and
    ``dtype``): what validation looks at, without memory for the values."""
    return {k: np.broadcast_to(np.zeros((), t.dtype), t.shape) for k, t in tensors.items()}


def check_names(op: Operator) -> None:
    """Reject a record whose ids could not appear in case ids and sweep files."""
    if not re.fullmatch(r"[a-z][a-z0-9_]*", op.id):
        raise ValueError(f"operator id {op.id!r} must be lower case letters, digits and _")
