"""Golden files of schema 1 (tests/data/schema1.h5, seven smoke cases written by the release
before schema 2) read, compare and export like new ones (docs/goldens.md, "Schema versions")."""

from __future__ import annotations

import json
import shutil

import h5py
import numpy as np
import pytest

import refspec.goldens as goldens
from refspec.comparator import compare
from refspec.goldens.cases import build_case
from refspec.goldens.export import export_cases
from refspec.goldens.sweep import load_sweep
from repo_paths import TESTS

OLD = TESTS / "data" / "schema1.h5"


def same_bits(a, b) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


@pytest.fixture(params=["with index rows", "without /summary"])
def old(request, tmp_path):
    """The schema-1 file, and a copy whose index lacks /summary (files older than it)."""
    if request.param == "with index rows":
        return OLD
    path = tmp_path / "no_summary.h5"
    shutil.copy(OLD, path)
    with h5py.File(path, "r+") as f:
        del f["summary"]
    return path


def test_a_schema_1_file_reads_as_schema_2(old):
    smoke = load_sweep("smoke")
    with goldens.open(old) as gf:
        assert gf.attrs["schema_version"] == 1 and len(gf) == 7
        assert {r.op for r in gf.summary()} == {"rope_grad", "rope", "nrc_grad", "nrc"}
        for case in gf:
            new = build_case(smoke.case(case.case_id))           # today's generator, same case
            assert case.op == new.op and case.params == {**new.params, "tiers": case.params["tiers"]}
            assert case.seed == new.seed and case.expected_error == (
                None if new.error is None else new.error.code)
            for group in ("inputs", "expected", "exact"):
                arrays = getattr(case, group)
                assert list(arrays) == list(new.present(group)), (case.case_id, group)
                for name in arrays:
                    assert same_bits(arrays[name][()], new.present(group)[name])
            assert sorted(case.sum_abs) == sorted(new.sums())     # computed where schema 1 lacks it
            for name, s in new.sums().items():
                assert same_bits(np.asarray(case.sum_abs[name][()]), s), (case.case_id, name)


def test_a_schema_1_file_compares_and_exports_like_the_same_cases_written_now(old, tmp_path):
    with goldens.open(old) as gf:
        ids = gf.case_ids()
        positive = [c for c in ids if not gf[c].is_negative]
        # the rounded goldens, with float32 outputs one ulp away: some pass, some do not
        actual = {}
        for cid in positive:
            case = gf[cid]
            actual[cid] = {n: np.nextafter(case.expected[n][()], np.inf) if
                           case.expected[n].dtype == np.float32 else case.expected[n][()]
                           for n in case.output_names}
    smoke = load_sweep("smoke")
    new = tmp_path / "new.h5"
    with goldens.GoldenWriter(new, sweep_name="smoke", sweep_definition=smoke.definition,
                              sweep_seed=smoke.seed) as w:
        for cid in ids:
            w.write_case(build_case(smoke.case(cid)))
    a, b = compare(old, actual, cases=positive), compare(new, actual, cases=positive)
    assert [(r.case_id, r.output, r.status, r.reason) for r in a.results] == \
        [(r.case_id, r.output, r.status, r.reason) for r in b.results]
    statuses = [r.status for r in a.results]
    assert len(statuses) >= 10 and "pass" in statuses and "fail" in statuses
    (d_old,) = export_cases(old, tmp_path / "e_old", [positive[0]])
    (d_new,) = export_cases(new, tmp_path / "e_new", [positive[0]])
    j_old, j_new = (json.loads((tmp_path / e / positive[0] / "case.json").read_text())
                    for e in ("e_old", "e_new"))
    assert j_old["operator"] == j_new["operator"] == "rope_grad"
    assert j_old["parameters"] == {**j_new["parameters"], "tiers": j_old["parameters"]["tiers"]}
    assert [f["sha256"] for f in j_old["files"]] == [f["sha256"] for f in j_new["files"]]


def test_a_schema_1_file_cannot_be_resumed(tmp_path):
    path = tmp_path / "old.h5"
    shutil.copy(OLD, path)
    with goldens.open(path) as gf:
        attrs = gf.attrs
    with pytest.raises(goldens.GoldenFileError, match="schema_version 1 is not 2"):
        goldens.GoldenWriter(path, sweep_name=attrs["sweep_name"],
                             sweep_definition=attrs["sweep_definition"],
                             sweep_seed=attrs["sweep_seed"], resume=True)
