"""A cache updated in place keeps its whole value in expected/ but only the exact values of the
elements the call writes (exact/, at the flat offsets of written/): ``verify_output`` checks
those elements, each rounded once, and nothing else of the cache."""

from __future__ import annotations

import numpy as np
import pytest

from cli_helpers import invoke
from refspec import goldens
from refspec.goldens import CorruptGoldenError
from refspec.goldens.integrity import verify_output


class _Array:
    """An array as a golden file's reader gives it, read in blocks of one row of its first
    axis (so the offsets are found across blocks)."""

    def __init__(self, values, name):
        self.values, self.name = values, name
        self.shape, self.dtype = values.shape, values.dtype

    def read(self):
        return self.values

    def blocks(self, max_bytes):
        for i in range(self.shape[0]):
            yield (i,), self.values[i]

    def corrupt(self, what):
        return CorruptGoldenError(what, "f.h5", "the case", self.name)


class _Case:
    def __init__(self, expected, exact, written, name):
        self.expected = {name: _Array(expected, name)}
        self.exact = {name: _Array(exact, name)}
        self.written = {name: _Array(written, name)}


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    """A quantised cache of a KvRmsNormRopeCache case: (expected, exact, written, name)."""
    path = tmp_path_factory.mktemp("kv") / "kv.h5"
    assert invoke("generate", "--op", "kv_rope_cache", "-o", path).exit_code == 0
    with goldens.open(path) as f:
        for case_id in f.case_ids():
            case = f[case_id]
            for name in case.written:
                if case.expected[name].dtype == np.int8:
                    return (case.expected[name].read(), case.exact[name].read(),
                            case.written[name].read(), name)
    raise AssertionError("the smoke sweep has no int8 cache")


def test_the_written_elements_of_a_sound_cache_are_its_exact_values_rounded_once(cache):
    expected, exact, written, name = cache
    verify_output(_Case(expected, exact, written, name), name)


def test_a_written_element_changed_is_named_by_its_offset(cache):
    expected, exact, written, name = cache
    changed = expected.copy()
    at = int(written[len(written) // 2])
    flat = changed.reshape(-1)
    flat[at] = flat[at] - 1 if flat[at] > -128 else flat[at] + 1
    with pytest.raises(CorruptGoldenError, match=f"flat offset {at} is not exact/{name}"):
        verify_output(_Case(changed, exact, written, name), name)


def test_an_element_the_call_does_not_write_is_not_checked(cache):
    expected, exact, written, name = cache
    changed = expected.copy()
    outside = np.setdiff1d(np.arange(changed.size), written)[0]
    changed.reshape(-1)[outside] ^= 1
    verify_output(_Case(changed, exact, written, name), name)


def test_exact_values_of_another_count_than_the_offsets_are_refused(cache):
    expected, exact, written, name = cache
    with pytest.raises(CorruptGoldenError, match="names"):
        verify_output(_Case(expected, exact[:-1], written, name), name)
