"""Shared fixtures for the tests of the executable spec; the test kernels of tests/impls/
importable by name (``import implementations``), as they import each other."""

from __future__ import annotations

import sys
import zlib
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "impls"))


@pytest.fixture
def rng(request) -> np.random.Generator:
    """A generator seeded from the test's own id: stable across runs and independent of the
    order in which tests run (no global random state)."""
    return np.random.default_rng(zlib.crc32(request.node.nodeid.encode()))


@pytest.fixture(scope="session")
def msprobe_run(tmp_path_factory):
    """``msprobe_run(**config)``: the path of a dump that msprobe itself wrote
    (tests/msprobe_runs.py), one run per config in a session; treat it as read-only (copy it
    to change it). Skips without PyTorch or mindstudio-probe."""
    import importlib.util
    import json

    pytest.importorskip("torch")
    # found, not imported: importing msprobe puts a tensorflow stand-in into sys.modules
    # (its __init__), which the tests' own process does not need; the runs import it
    if importlib.util.find_spec("msprobe") is None:
        pytest.skip("mindstudio-probe (msprobe) is not installed: pip install '.[test]'")
    from msprobe_runs import run_msprobe
    runs: dict = {}

    def run(**config):
        key = json.dumps(config, sort_keys=True)
        if key not in runs:
            runs[key] = run_msprobe(tmp_path_factory.mktemp("msprobe"), **config)
        return runs[key]

    return run
