"""Shared fixtures for the tests of the executable spec."""

from __future__ import annotations

import zlib

import numpy as np
import pytest


@pytest.fixture
def rng(request) -> np.random.Generator:
    """A generator seeded from the test's own id: stable across runs and independent of the
    order in which tests run (no global random state)."""
    return np.random.default_rng(zlib.crc32(request.node.nodeid.encode()))
