"""An implementation's functions as a source of actual outputs (``refspec run``, the pytest
plugin): each golden case's stored inputs are fed to the function named like the spec's
(``rotary_position_embedding_grad``, ``norm_rope_concat_backward``, ...), and what it returns is
judged exactly like a kernel's dump (docs/run.md).

- The function is called with every tensor parameter of the spec function by keyword (None where
  the case has no such input), the operator's attributes (``mode``, ``norm_type``, ...), and the
  case's chip profile as ``soc=`` when it takes that keyword. It may return a tuple in the spec's
  output order (a named tuple too), a dict keyed by spec or aclnn names, or one array for a
  one-output operator.
- With ``autograd``, a backward case is judged through its forward: the module's forward runs
  under torch autograd on the case's inputs and the stored upstream gradients are fed to
  ``backward()`` (the operator record's :class:`refspec.ops.Autograd` says which gradient is
  which output). Where the backward takes values the forward saves (NormRopeConcat's mean and
  rstd), the reference is the spec's backward at the forward's own values: those are what its
  backward uses. Negative cases of a backward are not run this way (autograd calls the forward,
  whose own negative cases judge what it rejects).
- A negative case passes when the function raises with the expected aclnn code (an integer
  attribute ``code``, or the code in its message); an exception without a code is a rejection
  whose code cannot be checked (reported as such); returning normally fails the case.
- A function the module lacks leaves its cases not run.
- An output updated in place (a KV cache) is the input of the same name: the function gets a
  copy of it (a new one at every call) and is judged on what it leaves there, unless it returns
  the output itself (a function that returns the updated cache, or a new one).
- Each case is timed: the first call is judged, then ``repeat`` more calls are timed (the device
  synchronised around each) and their median reported.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import os
import re
import statistics
import sys
import time
from dataclasses import dataclass, field

import numpy as np

from ... import ops
from ...spec.errors import AclnnError, one_line
from .arrays import NOT_RECORDED, Problem, check_array
from .base import UNKNOWN_CODE, ActualSource
from .frameworks import FrameworkError, framework
from .memory_case import spec_case

__all__ = ["ImplementationError", "Implementation", "ImplementationSource", "CaseRun",
           "load_implementation", "aclnn_code"]

_CODE_IN_MESSAGE = re.compile(r"(?<!\d)([15]6[01]\d{3})(?!\d)")


class ImplementationError(ValueError):
    """The implementation cannot be used as asked (not importable, a bad result)."""


def load_implementation(name: str):
    """The implementation ``name``: a dotted module name on ``sys.path`` (the working directory
    first) or the path of a ``.py`` file (its folder put first on ``sys.path``, so the modules
    beside it import), optionally followed by ``:ATTR``, an object of that module whose
    attributes are the functions (a class instance, a namespace)."""
    module_part, _, attr = name.rpartition(":")
    if module_part and attr.isidentifier() and not module_part.endswith(("\\", "/")):
        module = load_implementation(module_part)
        try:
            return getattr(module, attr)
        except AttributeError:
            raise ImplementationError(f"--impl {name}: {module_part} has no attribute {attr!r}") from None
    if name.endswith(".py") or os.sep in name or "/" in name:
        return _load_file(name)
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name and name.startswith(exc.name):
            raise ImplementationError(f"--impl {name}: no module named {exc.name!r} (give a "
                                      "dotted module name importable from here, or a .py file)") from None
        raise ImplementationError(f"--impl {name}: importing it failed: {one_line(exc)}") from None
    except Exception as exc:
        raise ImplementationError(f"--impl {name}: importing it failed: "
                                  f"{type(exc).__name__}: {one_line(exc)}") from None


def _load_file(name: str):
    path = os.path.abspath(name)
    if not os.path.exists(path):
        raise ImplementationError(f"--impl {name}: no such file")
    if not os.path.isfile(path) or not path.endswith(".py"):
        raise ImplementationError(f"--impl {name}: not a Python source file (give a .py file, or "
                                  "a dotted module name importable from here)")
    folder = os.path.dirname(path)
    if folder not in sys.path:            # as `python kernels.py` does: modules beside it import
        sys.path.insert(0, folder)
    module_name = "refspec_impl_" + re.sub(r"\W", "_", os.path.splitext(os.path.basename(path))[0])
    if module_name in sys.modules and getattr(sys.modules[module_name], "__file__", None) == path:
        return sys.modules[module_name]
    spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        del sys.modules[module_name]
        raise ImplementationError(f"--impl {name}: importing it failed: "
                                  f"{type(exc).__name__}: {one_line(exc)}") from None
    return module


def aclnn_code(exc: BaseException) -> int:
    """The aclnn status an exception carries: its integer ``code`` attribute, else a code
    written in its message (161001 ... 561103), else ``UNKNOWN_CODE``."""
    code = getattr(exc, "code", None)
    if isinstance(code, (int, np.integer)) and not isinstance(code, bool) and code:
        return int(code)
    found = _CODE_IN_MESSAGE.search(str(exc))
    return int(found.group(1)) if found else UNKNOWN_CODE


@dataclass(frozen=True)
class Implementation:
    """What ``refspec run`` judges: the implementation ``name`` (see
    :func:`load_implementation`) in ``framework`` on ``device``. An actual source made from
    this description (:meth:`open`) in each process that judges cases, so ``--jobs`` workers
    and Dask workers load the implementation themselves."""

    name: str
    framework: str = "numpy"
    device: str | None = None
    autograd: bool = False
    repeat: int = 3

    def open(self) -> "ImplementationSource":
        return ImplementationSource(load_implementation(self.name),
                                    framework(self.framework, self.device),
                                    autograd=self.autograd, repeat=self.repeat, label=self.name)


@dataclass
class CaseRun:
    """What running one case gave: the function called, outputs by name, the status (0, an
    aclnn code, or UNKNOWN_CODE), the exception's text, why it was not run, the values of
    backward inputs the forward saved, and the timed calls (seconds)."""

    function: str = ""
    outputs: dict = field(default_factory=dict)
    status: int = 0
    error: str = ""
    not_run: str = ""
    saved: dict = field(default_factory=dict)
    times: list = field(default_factory=list)

    @property
    def median(self) -> float | None:
        return statistics.median(self.times) if self.times else None


class ImplementationSource(ActualSource):
    """Runs an implementation's functions on the cases the comparator judges, one case at a
    time (its results kept until the next case)."""

    kind = "implementation"

    def __init__(self, impl, fw, *, autograd: bool = False, repeat: int = 3,
                 label: str | None = None):
        if autograd and not fw.autograd:
            raise FrameworkError("--autograd needs --framework torch")
        super().__init__(label or getattr(impl, "__name__", type(impl).__name__))
        self.impl = impl
        self.framework = fw
        self.autograd = autograd
        self.repeat = max(0, int(repeat))
        self._timings: dict[str, float] = {}
        self._runs: dict[str, CaseRun] = {}

    # --- the comparator's questions -------------------------------------------------------
    def reference(self, case):
        run = self._run_once(case)
        if not run.saved:
            return case
        record = ops.get(case.op)
        inputs = {**case.input_arrays(), **run.saved}
        try:
            ref = spec_case(record.function, soc=case.soc or None, case_id=case.case_id,
                            **inputs, **record.attrs_of(case.params))
        except AclnnError:                    # saved values the backward cannot take (dtype)
            return case
        ref.params = dict(case.params)
        ref.regenerate = (f"{case.regenerate} (reference: the backward at the forward's own "
                          f"{', '.join(run.saved)})")
        return ref

    def status(self, case_id: str):
        run = self._runs[case_id]
        return (None if run.not_run else run.status), None

    def rejection(self, case_id: str) -> str:
        """``my_kernels.norm_rope_concat raised ValueError: ...`` ("" when nothing raised)."""
        run = self._runs[case_id]
        return f"{self.path}.{run.function} raised {run.error}" if run.error else ""

    def not_run_reason(self, case_id: str) -> str:
        return self._runs[case_id].not_run

    def lookup(self, case_id, op, output, dtype, shape):
        run = self._runs[case_id]
        if run.not_run:
            return Problem("missing", run.not_run)
        where = f"{self.path}.{run.function}"
        if output not in run.outputs:
            stats = [o.name for o in ops.get(op).outputs if o.role == "stats"]
            if output in stats and not set(stats) & set(run.outputs):
                return Problem(NOT_RECORDED, f"{where} returned no statistics (it returned "
                                             f"{', '.join(run.outputs) or 'nothing'}), so "
                                             f"{output} is not judged; return the statistics "
                                             "after the other outputs, in the spec's order, to "
                                             "judge them")
            return Problem("missing", f"{where} returned no {output}")
        return check_array(run.outputs[output], dtype, shape, f"{where}[{output}]")

    @property
    def timings(self) -> dict:
        return dict(self._timings)

    # --- running --------------------------------------------------------------------------
    def _run_once(self, case) -> CaseRun:
        if case.case_id not in self._runs:
            self._runs = {case.case_id: self.run(case)}          # one case kept at a time
            median = self._runs[case.case_id].median
            if median is not None:
                self._timings[case.case_id] = median
        return self._runs[case.case_id]

    def run(self, case) -> CaseRun:
        """Call the implementation on one case (see the module docstring)."""
        record = ops.get(case.op)
        plan_of = record.autograd if self.autograd else None
        if plan_of is not None and case.expected_error is not None:
            return CaseRun(not_run=f"a negative case of {record.function}: --autograd calls the "
                                   "forward, whose own negative cases judge what it rejects")
        inputs = case.input_arrays()
        attrs = record.attrs_of(case.params)
        if plan_of is not None:
            plan = plan_of(record.call_of(case.params, inputs), case.params)
            target = ops.get(plan.forward)
        else:
            plan, target = None, record
        fn = getattr(self.impl, target.function, None)
        if fn is None:
            why = (f" (--autograd judges {record.function} through it)" if plan else "")
            return CaseRun(not_run=f"{self.path} has no {target.function}{why}")
        extra = {"soc": case.soc or None} if _takes(fn, "soc") else {}

        def call():
            if plan is not None:
                return self._autograd_call(fn, target, plan, inputs, extra)
            args = {t.name: (self.framework.tensor(inputs[t.name]) if t.name in inputs else None)
                    for t in record.inputs}
            outputs = _outputs(fn(**args, **attrs, **extra), record)
            for name in record.in_place:         # a cache it updated in place, not returned
                if outputs.get(name) is None and args.get(name) is not None:
                    outputs[name] = args[name]
            return outputs, {}

        try:
            outputs, saved = self._timed(call)
        except Exception as exc:
            return CaseRun(function=target.function, status=aclnn_code(exc),
                           error=f"{type(exc).__name__}: {one_line(exc)}")
        run = CaseRun(function=target.function,
                      outputs={k: self.framework.array(v) for k, v in outputs.items()
                               if v is not None},
                      saved={k: self.framework.array(v) for k, v in saved.items()})
        for _ in range(self.repeat):
            times = []
            try:
                self._timed(call, times)
            except Exception:                 # judged by the first call; timing stops here
                break
            run.times += times
        return run

    def _timed(self, call, times: list | None = None):
        self.framework.synchronize()
        t = time.perf_counter()
        result = call()
        self.framework.synchronize()
        if times is not None:
            times.append(time.perf_counter() - t)
        return result

    def _autograd_call(self, fn, forward: ops.Operator, plan: ops.Autograd, inputs: dict,
                       extra: dict) -> tuple[dict, dict]:
        fw = self.framework
        leaves = {n: fw.tensor(a, requires_grad=n in plan.leaves) for n, a in plan.inputs.items()}
        args = {t.name: leaves.get(t.name) for t in forward.inputs}
        outs = _outputs(fn(**args, **plan.attrs, **extra), forward)
        missing = [n for n in plan.upstream if outs.get(n) is None]
        if missing:
            raise ImplementationError(f"{forward.function} returned no {', '.join(missing)}")
        names = list(plan.upstream)
        fw.backward([outs[n] for n in names], [fw.tensor(inputs[plan.upstream[n]]) for n in names])
        grads = {}
        for n, out in plan.leaves.items():
            g = fw.grad(leaves[n])
            # an input the forward did not use gets no gradient: zero, as autograd means it
            grads[out] = g if g is not None else fw.zeros_like(leaves[n])
        saved = {plan.saved[n]: outs[n] for n in plan.saved if outs.get(n) is not None}
        return grads, saved


def _outputs(result, record: ops.Operator) -> dict:
    """A function's result as {output name: value} (tuple, named tuple, dict or one array)."""
    names = record.output_names
    if isinstance(result, dict):
        try:
            return {record.python_name(k): v for k, v in result.items()}
        except KeyError as exc:
            raise ImplementationError(f"{record.function} returned {exc.args[0]}") from None
    if isinstance(result, (tuple, list)):
        if len(result) > len(names):
            raise ImplementationError(f"{record.function} returned {len(result)} values; it has "
                                      f"{len(names)} outputs ({', '.join(names)})")
        return dict(zip(names, result))
    return {names[0]: result}


def _takes(fn, name: str) -> bool:
    """Whether ``fn`` accepts the keyword ``name`` (by name or through ``**kwargs``)."""
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False
    return name in params or any(p.kind is p.VAR_KEYWORD for p in params.values())
