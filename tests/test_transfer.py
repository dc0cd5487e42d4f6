"""refspec.transfer: a case's arrays passed through a file keep their dtype, shape and bits;
any failure to write the file falls back to the data itself; received files leave no name."""

from __future__ import annotations

import os

import numpy as np
import pytest

import refspec
from refspec import transfer
from refspec.cases import CaseData
from refspec.terms import OutputTerms


def a_case(rng) -> CaseData:
    x = rng.standard_normal((3, 5, 7))
    return CaseData(
        "op/case", "rotary_position_embedding_grad", {"B": 3}, 7, "A2", "random",
        inputs={"dy": refspec.round_to(x, refspec.bfloat16), "cos": x[:1].astype(np.float16),
                "x": None, "empty": np.zeros((0, 4), np.float32)},
        expected={"dx": x.astype(np.float32)}, exact={"dx": x},
        terms={"dx": OutputTerms("elementwise"),
               "dcos": OutputTerms("reduction", 3, np.abs(x[0]))},
        axes={"dx": "BSD"}, self_stats={"dx": "{}"})


def arrays_of(d: CaseData) -> dict:
    out = {}
    for g in ("inputs", "expected", "exact"):
        for k, v in getattr(d, g).items():
            out[g, k] = None if v is None else (v.dtype, v.shape, v.tobytes())
    for k, t in d.terms.items():
        out["terms", k] = (t.comparison_class, t.reduced_terms,
                           None if t.sum_abs is None else (t.sum_abs.dtype, t.sum_abs.tobytes()))
    return out


@pytest.fixture
def directory():
    d = transfer.shared_directory(1 << 20)
    if d is None:
        pytest.skip("no memory file system here")
    yield d
    transfer.remove_directory(d)
    assert not os.path.exists(d)


def test_a_shipped_case_comes_back_bit_for_bit(directory):
    data = a_case(np.random.default_rng(0))
    shipped = transfer.ship(data, directory, min_bytes=0)
    assert shipped.shipped_to and os.path.dirname(shipped.shipped_to) == directory
    assert isinstance(shipped.exact["dx"], transfer.Slot)        # no array travels by pickle
    assert isinstance(shipped.terms["dcos"].sum_abs, transfer.Slot)
    back = transfer.receive(shipped)
    assert back.shipped_to is None and os.listdir(directory) == []   # name removed at once
    assert arrays_of(back) == arrays_of(data)
    assert back.inputs["dy"].dtype == refspec.bfloat16
    assert (back.case_id, back.params, back.axes, back.self_stats) == \
        (data.case_id, data.params, data.axes, data.self_stats)
    with pytest.raises(ValueError):
        back.exact["dx"][0, 0, 0] = 1.0                           # read-only views


def test_small_cases_and_no_directory_travel_as_they_are(directory):
    data = a_case(np.random.default_rng(1))
    assert transfer.ship(data, directory) is data                # under MIN_BYTES
    assert transfer.ship(data, None, min_bytes=0) is data
    assert transfer.receive(data) is data


def test_a_file_that_cannot_be_written_falls_back(directory, monkeypatch):
    data = a_case(np.random.default_rng(2))
    assert transfer.ship(data, os.path.join(directory, "missing"), min_bytes=0) is data
    real = os.fdopen

    class Full:                                     # a memory file system that runs out
        def __init__(self, fd, *args, **kwargs):
            self.fh = real(fd, *args, **kwargs)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.fh.close()

        def write(self, b):
            raise OSError(28, "No space left on device")

    monkeypatch.setattr(transfer.os, "fdopen", Full)
    assert transfer.ship(data, directory, min_bytes=0) is data
    assert os.listdir(directory) == []              # the partial file is removed


def test_directories_of_killed_runs_are_removed(tmp_path):
    import subprocess
    import sys
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    dead = tmp_path / f"refspec-{int(gone.stdout)}-abc"     # its process has exited
    mine = tmp_path / f"refspec-{os.getpid()}-def"          # this process: alive
    other = tmp_path / "refspec-notapid-x"                   # not one of ours
    for d in (dead, mine, other):
        d.mkdir()
        (d / "case-1").write_bytes(b"x")
    assert transfer.remove_stale(str(tmp_path)) == [str(dead)]
    assert not dead.exists() and mine.exists() and other.exists()
