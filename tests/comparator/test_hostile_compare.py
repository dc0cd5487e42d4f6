"""A damaged golden file is the golden file's problem, never a verdict on the kernel: `refspec
compare` and `refspec run` of every file of the hostile catalogue (tests/hostile_goldens.py:
flipped bytes in an input, an expected and an exact output, expected set to NaN or deleted,
storage outside the file, an incomplete file, ...) end in one line and exit code 2, never a
traceback, never exit code 1 (a kernel that failed), never PASS, and write no report;
``refspec.compare`` raises a ``GoldenFileError``. The actual outputs are the sound file's own
expected outputs, which pass. Every report states the golden file's digest and when it was
made; actual files older than the golden file are named."""

from __future__ import annotations

import json
import os
import shutil
import xml.etree.ElementTree as ET

import pytest

import refspec
import refspec.goldens as goldens
from cli_helpers import assert_user_error, invoke
from hostile_goldens import BIG, CASE_OF, CATALOGUE, hostile_file, sound_file
from refspec import ops
from refspec.goldens.export import export_cases
from repo_paths import REPO

NUMPY_IMPL = os.path.join(REPO, "tests", "impls", "numpy_float32.py")
#: the entries that are damage inside the file (the others: not a golden file, incomplete)
CORRUPT = {e.name for e in CATALOGUE} - {"missing root attribute", "truncated file",
                                         "file marked incomplete"}


@pytest.fixture(scope="module")
def sound(tmp_path_factory):
    """The sound file and a folder of actual outputs that pass against it."""
    d = tmp_path_factory.mktemp("sound")
    path = sound_file(d / "sound.h5")
    actual = d / "actual"
    export_cases(path, actual)
    with goldens.open(path) as gf:
        for case in gf:
            for name in case.output_names:
                a = case.expected[name][()]
                a.view(f"u{a.itemsize}").tofile(actual.joinpath(
                    *case.case_id.split("/"), ops.get(case.op).tensor_file(name)))
    # the compiled pass loaded in this process: no later compare prints the notice of a
    # compile that takes a while (on a busy machine), which would be a second line
    assert refspec.compare(path, actual).passed
    return path, actual


def test_the_sound_file_passes(sound):
    path, actual = sound
    result = invoke("compare", path, actual)
    assert result.exit_code == 0, result.output
    assert result.output.strip().splitlines()[-1].startswith("PASS: ")


@pytest.mark.parametrize("entry", CATALOGUE, ids=[e.name for e in CATALOGUE])
def test_a_hostile_golden_is_one_line_exit_2_and_no_report(sound, tmp_path, entry):
    sound_path, actual = sound
    path = hostile_file(sound_path, entry, tmp_path)
    report = tmp_path / "r.json"
    report.write_text('{"summary": {"line": "PASS: an earlier run"}}')
    result = invoke("compare", path, actual, "--json", report)
    assert_user_error(result, os.path.basename(path), *entry.fragments)
    if entry.name in CORRUPT:
        assert "GOLDEN DAMAGED" in result.stderr and "not of the kernel" in result.stderr
    assert "PASS" not in result.stdout and not report.exists()      # the earlier report too
    with pytest.raises(goldens.GoldenFileError) as info:
        refspec.compare(path, actual)
    assert all(f in str(info.value) for f in entry.fragments)


@pytest.mark.parametrize("name", ["flipped byte, chunked", "flipped byte in exact, chunked",
                                  "expected set to NaN", "missing dataset", "external storage"])
def test_refspec_run_and_parallel_compare_on_a_damaged_golden(sound, tmp_path, name):
    entry = next(e for e in CATALOGUE if e.name == name)
    path = hostile_file(sound[0], entry, tmp_path)
    case = CASE_OF.get(name, BIG)
    result = invoke("run", path, "--impl", NUMPY_IMPL, "--case", case)
    assert_user_error(result, "GOLDEN DAMAGED", os.path.basename(path), case, *entry.fragments)
    result = invoke("compare", path, sound[1], "--jobs", "2")
    assert_user_error(result, "GOLDEN DAMAGED", os.path.basename(path), case, *entry.fragments)


def test_an_incomplete_golden_is_judged_when_asked_for_and_says_so(sound, tmp_path):
    entry = next(e for e in CATALOGUE if e.name == "file marked incomplete")
    path = hostile_file(sound[0], entry, tmp_path)
    result = invoke("compare", "--allow-incomplete", path, sound[1])
    assert result.exit_code == 0, result.output
    assert "NOT COMPLETE" in result.output
    report = refspec.compare(path, sound[1], allow_incomplete=True)
    assert report.passed and report.to_dict()["golden_complete"] is False


def test_every_report_states_the_golden_digest_and_times(sound, tmp_path):
    path, actual = sound
    with goldens.open(path) as gf:
        digest, created = gf.digest, gf.created
    assert digest.startswith("sha256:") and len(digest) == 7 + 64 and created.endswith("Z")
    result = invoke("compare", path, actual, "--json", tmp_path / "r.json", "--junit",
                    tmp_path / "r.xml", "--html", tmp_path / "r.html")
    assert result.exit_code == 0
    line = next(ln for ln in result.output.splitlines() if ln.startswith("golden sha256:"))
    assert line.startswith(f"golden {digest} made {created}; judged 20")
    doc = json.loads((tmp_path / "r.json").read_text())
    assert (doc["golden_digest"], doc["golden_created"]) == (digest, created)
    assert doc["judged_at"] >= created
    props = {p.get("name"): p.get("value")
             for p in ET.parse(tmp_path / "r.xml").getroot().iter("property")}
    assert props["golden_digest"] == digest and props["judged_at"] == doc["judged_at"]
    assert f"golden {digest} made {created}" in (tmp_path / "r.html").read_text()


def test_the_digest_follows_the_file_not_its_name(sound, tmp_path):
    copy = tmp_path / "copy.h5"
    shutil.copyfile(sound[0], copy)
    again = sound_file(tmp_path / "again.h5")              # the same cases, made anew
    with goldens.open(sound[0]) as a, goldens.open(copy) as b, goldens.open(again) as c:
        assert a.digest == b.digest
        assert a.digest != c.digest or a.created == c.created


def test_actual_files_older_than_the_golden_are_named(sound, tmp_path):
    path, actual = sound
    old = tmp_path / "actual"
    shutil.copytree(actual, old)
    stale = old / "rope_grad" / "big" / "dx.bin"
    status = old / "rope_grad" / "small" / "status.json"
    status.write_text('{"code": 0}')
    os.utime(stale, (1e9, 1e9))                             # 2001
    os.utime(status, (1e9, 1e9))
    result = invoke("compare", path, old)
    assert result.exit_code == 0
    notes = [ln for ln in result.output.splitlines() if ln.startswith("note: ")]
    assert len(notes) == 1 and "older than the golden" in notes[0]
    assert str(stale) in notes[0] and str(status) in notes[0] and "2 actual files" in notes[0]
    assert str(stale) in result.stderr                      # a warning on stderr too
    assert not any("older than" in n for n in refspec.compare(path, actual).notes)
    report = refspec.compare(path, old, jobs=2)
    assert [n for n in report.notes if "older than" in n] == [notes[0][len("note: "):]]


def test_a_damaged_golden_file_given_as_the_actual_outputs_is_unreadable_not_golden(sound,
                                                                                  tmp_path):
    """The damage of the file of actual outputs is an input problem of those outputs."""
    entry = next(e for e in CATALOGUE if e.name == "flipped byte, chunked")
    actual = hostile_file(sound[0], entry, tmp_path)
    report = refspec.compare(sound[0], actual, cases=[BIG])
    row = next(r for r in report.results if r.output == "dx")
    assert row.status == "unreadable" and "Fletcher32" in row.reason and actual in row.reason
    assert not report.passed and report.exit_code == 1
    entry = next(e for e in CATALOGUE if e.name == "index text that is not JSON")
    actual = hostile_file(sound[0], entry, tmp_path)
    report = refspec.compare(sound[0], actual, cases=[CASE_OF[entry.name]])
    assert {r.status for r in report.results} == {"unreadable"}


def test_a_golden_made_from_a_kernels_recorded_runs_names_no_older_file(sound, tmp_path):
    """`refspec golden` makes goldens from case folders, msprobe dumps and vendor UT folders
    that hold the kernel's outputs already: those are older than the golden file by nature."""
    import h5py
    made_from_folders = tmp_path / "from_folders.h5"
    shutil.copyfile(sound[0], made_from_folders)
    with h5py.File(made_from_folders, "r+") as f:
        f.attrs["sweep_name"] = "case-folders"
    old = tmp_path / "actual"
    shutil.copytree(sound[1], old)
    os.utime(old / "rope_grad" / "big" / "dx.bin", (1e9, 1e9))
    assert not any("older than" in n for n in refspec.compare(made_from_folders, old).notes)
    assert any("older than" in n for n in refspec.compare(sound[0], old).notes)
