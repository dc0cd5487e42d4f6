"""Small comparisons never wait for a compiler: outputs of at most COMPILED_ABOVE elements are
judged by the NumPy pass (the same report as the compiled pass), so numba is not even imported;
a large output's first compiled pass says so in one line when it takes a while."""

from __future__ import annotations

import subprocess
import sys

import numpy as np

from refspec.comparator import compare
from refspec.comparator.sources.memory_case import spec_case
from refspec.comparator.judging.options import COMPILED_ABOVE


def _case(shape, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape).astype(np.float32)
    theta = rng.uniform(0, 6.3, (1, 1) + shape[2:]).astype(np.float32)
    return spec_case("rope", x=x, cos=np.cos(theta), sin=np.sin(theta), mode=0, soc="A2")


def test_the_default_gives_the_compiled_report_below_the_threshold_too():
    case = _case((2, 4, 64, 32))
    assert np.prod((2, 4, 64, 32)) <= COMPILED_ABOVE
    y = np.array(case.expected["y"][()], copy=True)
    y.reshape(-1)[::7] = np.nextafter(y.reshape(-1)[::7], np.float32(np.inf))
    y.reshape(-1)[5] = 3.0
    default, compiled = compare(case, {"y": y}), compare(case, {"y": y}, fast=True)
    (a,), (b,) = default.results, compiled.results
    assert (a.status, a.reason, a.message) == (b.status, b.reason, b.message)
    assert a.metrics.failures == b.metrics.failures and a.metrics.ulp_hist == b.metrics.ulp_hist
    assert a.metrics.max_abs.flat == b.metrics.max_abs.flat


SCRIPT = """
import sys, numpy as np
sys.path.insert(0, {tests!r})
from test_compile_wait import _case
import refspec.comparator.judging.measure as measure
measure.NOTICE_SECONDS = 0.0
from refspec.comparator import compare
case = _case({shape})
report = compare(case, {{"y": case.expected["y"][()]}})
print(report.passed, "numba" in sys.modules)
"""


def _run(shape):
    from pathlib import Path
    code = SCRIPT.format(tests=str(Path(__file__).parent), shape=shape)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=600)


def test_a_small_comparison_does_not_import_numba():
    out = _run((2, 4, 64, 32))
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True", "False"]
    assert "compiling" not in out.stderr


def test_a_large_comparison_says_it_compiles_when_that_takes_a_while():
    """(with the notice's delay set to 0 s, loading the cached pass is enough to trigger it)"""
    out = _run((2, 4, 128, 256))
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True", "True"]
    lines = [line for line in out.stderr.splitlines() if "compiling" in line]
    assert len(lines) == 1 and "once after installing" in lines[0], out.stderr
