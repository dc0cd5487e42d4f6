"""An implementation's functions as a source of actual outputs: each golden case's stored inputs
are fed to the function of the same name as the spec's (``rotary_position_embedding_grad``,
``norm_rope_concat_backward``, ...) and its results are judged like any kernel's dump
(docs/run.md).

- The function is called with every tensor parameter of the spec function by keyword (None where
  the case has no such input) and the operator's attributes (``mode``, ``norm_type``, ...); no
  ``soc`` or ``out_dtype``. It may return a tuple in the spec's output order (a named tuple
  too), a dict keyed by spec or aclnn names, or one array for a one-output operator.
- With ``autograd``, a backward case is judged through its forward: the module's forward
  function runs under torch autograd on the case's inputs and the stored upstream gradients are
  fed to ``backward()`` (the operator record says which gradient is which output:
  ``refspec.ops.Autograd``).
- A negative case passes when the function raises with the expected aclnn code (an integer
  attribute ``code``, or the code in its message); an exception without a code is a rejection
  whose code cannot be checked (reported as such); returning normally fails the case.
- A function the module lacks leaves its cases not run.
- Each case is timed: the first call is judged, then ``repeat`` more calls are timed and their
  median reported (the device synchronised around each call).
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

from .. import ops
from .actuals import ActualSource, Problem, check_array
from .frameworks import FrameworkError

__all__ = ["ImplementationError", "load_implementation", "ImplementationSource", "CaseRun",
           "UNKNOWN_CODE", "aclnn_code"]

#: the status of a case whose function raised an exception that names no aclnn code
UNKNOWN_CODE = -1
_CODE_IN_MESSAGE = re.compile(r"(?<!\d)([15]6[01]\d{3})(?!\d)")


class ImplementationError(ValueError):
    """The implementation module cannot be used (not importable, no function of the spec)."""


def load_implementation(name: str):
    """The implementation ``name``: a dotted module name on ``sys.path`` (the working directory
    first) or the path of a ``.py`` file, optionally followed by ``:ATTR``, an object of that
    module whose attributes are the functions (a class instance, a namespace)."""
    module_part, _, attr = name.rpartition(":")
    if module_part and attr.isidentifier() and not module_part.endswith(("\\", "/")):
        module = load_implementation(module_part)
        try:
            return getattr(module, attr)
        except AttributeError:
            raise ImplementationError(f"--impl {name}: {module_part} has no attribute {attr!r}") from None
    if name.endswith(".py") or os.sep in name or "/" in name:
        path = os.path.abspath(name)
        if not os.path.isfile(path):
            raise ImplementationError(f"--impl {name}: no such file")
        module_name = "refspec_impl_" + re.sub(r"\W", "_", os.path.splitext(os.path.basename(path))[0])
        spec = importlib.util.spec_from_file_location(module_name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module
        try:
            spec.loader.exec_module(module)
        except Exception as exc:
            del sys.modules[module_name]
            raise ImplementationError(f"--impl {name}: importing it failed: "
                                      f"{type(exc).__name__}: {_one_line(exc)}") from None
        return module
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name and name.startswith(exc.name):
            raise ImplementationError(f"--impl {name}: no module named {exc.name!r} (give a "
                                      "dotted module name importable from here, or a .py file)") from None
        raise ImplementationError(f"--impl {name}: importing it failed: {_one_line(exc)}") from None
    except Exception as exc:
        raise ImplementationError(f"--impl {name}: importing it failed: "
                                  f"{type(exc).__name__}: {_one_line(exc)}") from None


def aclnn_code(exc: BaseException) -> int:
    """The aclnn status an exception carries: its integer ``code`` attribute, else a code
    written in its message (161001 ... 561103), else ``UNKNOWN_CODE``."""
    code = getattr(exc, "code", None)
    if isinstance(code, (int, np.integer)) and not isinstance(code, bool) and code:
        return int(code)
    found = _CODE_IN_MESSAGE.search(str(exc))
    return int(found.group(1)) if found else UNKNOWN_CODE


@dataclass
class CaseRun:
    """What running one case gave: outputs by name, the status (0, an aclnn code, or
    UNKNOWN_CODE), the exception's text, why it was not run, and the timed calls (seconds)."""

    function: str = ""
    outputs: dict = field(default_factory=dict)
    status: int | None = 0
    error: str = ""
    not_run: str = ""
    times: list = field(default_factory=list)

    @property
    def median(self) -> float | None:
        return statistics.median(self.times) if self.times else None


class ImplementationSource(ActualSource):
    """Runs ``module``'s functions on the cases of ``golden`` (a GoldenFile or case objects by
    id) as the comparator asks for them; one case's results are kept at a time."""

    kind = "implementation"

    def __init__(self, module, framework, *, autograd: bool = False, repeat: int = 3,
                 cases: dict | None = None, label: str | None = None):
        if autograd and not framework.autograd:
            raise FrameworkError("--autograd needs --framework torch")
        super().__init__(label or getattr(module, "__name__", "<implementation>"))
        self.module = module
        self.framework = framework
        self.autograd = autograd
        self.repeat = max(0, int(repeat))
        self.cases = cases if cases is not None else {}
        self.timings: dict[str, float | None] = {}
        self._current: tuple[str, CaseRun] | None = None

    # --- the comparator's questions -------------------------------------------------------
    def status(self, case_id: str):
        run = self.run(case_id)
        return (None if run.not_run else run.status), None

    def lookup(self, case_id, op, output, dtype, shape):
        run = self.run(case_id)
        if run.not_run:
            return Problem("missing", run.not_run)
        where = f"{self.path}.{run.function}"
        if output not in run.outputs:
            return Problem("missing", f"{where} returned no {output}")
        return check_array(run.outputs[output], dtype, shape, f"{where}[{output}]")

    def not_run_reason(self, case_id: str) -> str:
        return self.run(case_id).not_run

    # --- running --------------------------------------------------------------------------
    def run(self, case_id: str) -> CaseRun:
        if self._current is not None and self._current[0] == case_id:
            return self._current[1]
        case = self.cases[case_id]
        result = self._run(case)
        self._current = (case_id, result)
        self.timings[case_id] = result.median
        return result

    def _run(self, case) -> CaseRun:
        record = ops.get(case.op)
        if self.autograd and record.autograd is not None and case.expected_error is not None:
            return CaseRun(not_run=f"a negative case of {record.function}: --autograd calls the "
                                   "forward, whose own negative cases judge what it rejects")
        inputs = {n: case.inputs[n][()] for n in case.input_names}
        attrs = record.attrs_of(case.params)
        soc = {"soc": case.soc or None}
        if self.autograd and record.autograd is not None:
            plan = record.autograd(inputs, attrs)
            forward = ops.get(plan.forward)
            fn = getattr(self.module, forward.function, None)
            if fn is None:
                return CaseRun(not_run=f"{self.path} has no {forward.function} (--autograd "
                                       f"judges {record.function} through it)")
            name = forward.function
            extra = soc if _takes(fn, "soc") else {}

            def call():
                return self._autograd_call(fn, forward, plan, inputs, extra)
        else:
            fn = getattr(self.module, record.function, None)
            if fn is None:
                return CaseRun(not_run=f"{self.path} has no {record.function}")
            name = record.function
            extra = soc if _takes(fn, "soc") else {}

            def call():
                args = {t.name: (self.framework.tensor(inputs[t.name]) if t.name in inputs
                                 else None) for t in record.inputs}
                return _outputs(fn(**args, **attrs, **extra), record)
        try:
            outputs = self._timed(call)
        except Exception as exc:
            return CaseRun(function=name, status=aclnn_code(exc),
                           error=f"{type(exc).__name__}: {_one_line(exc)}")
        run = CaseRun(function=name, outputs={k: self.framework.array(v)
                                              for k, v in outputs.items() if v is not None})
        for _ in range(self.repeat):
            try:
                self._timed(call, times=run.times)
            except Exception:                 # judged by the first call; timing stops here
                break
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
                       extra: dict) -> dict:
        fw = self.framework
        leaves = {n: fw.tensor(a, requires_grad=n in plan.leaves) for n, a in plan.inputs.items()}
        args = {t.name: leaves.get(t.name) for t in forward.inputs}
        outs = _outputs(fn(**args, **plan.attrs, **extra), forward)
        missing = [n for n in plan.upstream if outs.get(n) is None]
        if missing:
            raise ImplementationError(f"{forward.function} returned no {', '.join(missing)}")
        names = list(plan.upstream)
        fw.backward([outs[n] for n in names],
                    [fw.tensor(inputs[plan.upstream[n]]) for n in names])
        # an input the forward did not use gets no gradient: zero, as autograd means it
        return {out: fw.grad(leaves[n]) if fw.grad(leaves[n]) is not None else fw.zeros_like(leaves[n])
                for n, out in plan.leaves.items()}


def _outputs(result, record: ops.Operator) -> dict:
    """A function's result as {output name: value} (tuple, named tuple, dict or one array)."""
    names = record.output_names
    if isinstance(result, dict):
        return {record.python_name(k): v for k, v in result.items()}
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


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())
