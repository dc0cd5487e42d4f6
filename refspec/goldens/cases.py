"""Turning one sweep case into golden data by calling the public spec functions.

``build_case`` asks the case's operator record (``refspec.ops``) for its inputs (planned
and sampled per distribution, rounded once to the case dtype) and calls the spec function with
``soc=`` the case's profile:

- a call the profile rejects makes a *negative case*: its inputs plus the error the spec raised
  (code and message; codes are never written down here);
- otherwise ``exact`` = the spec with ``out_dtype=np.float64`` and ``expected`` = each exact
  output rounded once (``refspec.spec.dtypes.round_to``) to its documented dtype, with the
  tolerance metadata of ``refspec.spec.terms`` and the axis letters of each output. A cache
  updated in place is asked of the spec with ``whole_caches=False``
  (``refspec.spec.kv_cache.CacheWrites``: the cache given, the offsets written and their exact
  values): it keeps its whole expected value (``CacheWrites.whole``, the written values
  rounded once into a copy of the cache) but only the exact values of the elements the call
  writes, and no whole cache is ever widened to float64.

With ``threads`` > 1 a large case uses a thread pool of the standard library for the pieces
that share nothing: drawing its tensors, the exact outputs beside the tolerance terms, and
rounding the outputs (NumPy releases the interpreter lock in its loops). The results are the
same bits whatever ``threads`` is.
"""

from __future__ import annotations

import shlex
from concurrent.futures import ThreadPoolExecutor
from contextlib import nullcontext
from dataclasses import dataclass, field
from math import prod

import numpy as np

from .. import ops
from ..spec.dtypes import round_to
from ..spec.errors import AclnnError
from ..spec.kv_cache import CacheWrites
from .sweep import Case

__all__ = ["CaseData", "build_case", "compute_case", "probe", "regenerate_command",
           "expected_outputs", "THREADED_ELEMENTS"]

#: cases with at least this many input elements use the thread pool of ``threads`` > 1
THREADED_ELEMENTS = 1 << 20


@dataclass
class CaseData:
    """One case as the writer stores it (plain data): its id, operator (record id),
    parameters, seed, inputs and, for a positive case, the expected outputs (rounded once),
    their exact values, tolerance terms (``refspec.spec.terms.OutputTerms``) and axis letters;
    for a negative case the error the spec raised. Absent tensors may be None."""

    case_id: str
    op: str
    params: dict
    seed: int
    inputs: dict
    expected: dict = field(default_factory=dict)
    exact: dict = field(default_factory=dict)
    terms: dict = field(default_factory=dict)
    axes: dict = field(default_factory=dict)
    error: AclnnError | None = None
    regenerate: str = ""

    @property
    def negative(self) -> bool:
        return self.error is not None

    def present(self, kind: str) -> dict:
        """The arrays of ``inputs``, ``expected`` or ``exact`` that are not None."""
        return {k: v for k, v in getattr(self, kind).items() if v is not None}

    def sums(self) -> dict:
        """The sums of absolute terms of the expected outputs that have them."""
        return {k: self.terms[k].sum_abs for k in self.present("expected")
                if self.terms[k].sum_abs is not None}

    def written(self) -> dict:
        """The flat offsets written into each output that is a cache updated in place."""
        return {k: w for k in self.present("expected")
                if (w := getattr(self.terms[k], "written", None)) is not None}


def probe(params: dict) -> AclnnError | None:
    """The error the case's profile raises for its arguments, found without computing anything
    (the validation sees zero-stride arrays of the planned shapes and dtypes: it never looks at
    values, and the rules check arguments before any arithmetic)."""
    return ops.get(params["op"]).probe(params)


def expected_outputs(op: ops.Operator, params: dict, exact: dict, pool=None, inputs=None) -> dict:
    """Each exact output rounded once (half to even) to its documented dtype; an output
    updated in place (``CacheWrites``) is the cache given with the values written rounded
    once to its dtype (the spec passes every other element through exactly)."""
    def one(k):
        if isinstance(exact[k], CacheWrites):
            return exact[k].whole()
        return round_to(exact[k], op.output_dtype(k, params["dtype"], inputs))
    names = list(exact)
    return dict(zip(names, (pool.map if pool else map)(one, names)))


def compute_case(op: ops.Operator, case_id: str, params: dict, seed: int, inputs: dict,
                 pool=None) -> CaseData:
    """The case of ``inputs`` (as stored, in their dtypes) and the parameters ``params`` (the
    spec's attributes and profile come from them through the record), validated by its
    profile: a negative case when the profile rejects the call, else the exact outputs, each
    rounded once to its dtype (``params["dtype"]``), their tolerance terms and axis letters.
    ``pool`` (an executor) computes the exact outputs beside the terms and rounds the outputs
    side by side (the same bits)."""
    data = CaseData(case_id, op.id, params, seed, inputs)
    call = op.call_of(params, inputs)
    caches = {"whole_caches": False} if op.in_place else {}
    try:
        if pool is None:
            exact = op.call(call, out_dtype=np.float64, **caches)
            terms = op.generation.terms(call)
        else:                                   # the two passes share nothing
            pending = pool.submit(op.generation.terms, call)
            exact = op.call(call, out_dtype=np.float64, **caches)
            terms = pending.result()
    except AclnnError as exc:
        data.error = exc
        return data
    data.terms = {k: terms[k] for k in exact}
    data.expected = expected_outputs(op, params, exact, pool, inputs)
    data.exact = {k: v.values if isinstance(v, CacheWrites) else v    # a cache: the exact values
                  for k, v in exact.items()}                          # written, at terms' offsets
    data.axes = {k: op.output_axes(params, k) for k in exact}
    return data


def build_case(case: Case, threads: int = 1) -> CaseData:
    """Inputs, outputs and metadata of one case (see the module docstring)."""
    op = ops.get(case.op)
    p = case.params
    large = sum(prod(t.shape) for t in op.generation.plan(p).values()) >= THREADED_ELEMENTS
    with (ThreadPoolExecutor(threads) if threads > 1 and large else nullcontext()) as pool:
        inputs = op.generation.sample(p, case.seed, pool)
        return compute_case(op, case.id, p, case.seed, inputs, pool)


def regenerate_command(case: Case, sweep_ref: str, seed: int) -> str:
    """The shell command that regenerates exactly this case."""
    return (f"refspec generate --sweep {shlex.quote(str(sweep_ref))} --seed {int(seed)} "
            f"--case {shlex.quote(case.id)} -o {shlex.quote(case.id.replace('/', '_') + '.h5')}")
