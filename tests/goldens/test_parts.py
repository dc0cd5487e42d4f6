"""Runs in parts (``--jobs N``): workers write their own part files, ``OUT.h5`` links to them and
reads like any golden file, ``pack`` copies it into one file, and an interrupted run (Ctrl-C of
the whole process group, kill -9 of a worker) never looks complete and resumes to the same
bits."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

import refspec.goldens as goldens
from refspec.goldens.engine import GenerateError, generate, parts_dir, split
from refspec.goldens.sweep import parse_sweep

from golden_files import file_content

SWEEP = """
name = "parts"
seed = 11
[[block]]
op = "rope_grad"
[block.axes]
soc = ["A2", "950"]
mode = ["half", "interleave"]
layout = ["BNSD", "BSND"]
dtype = ["bfloat16", "float32"]
shape = ["B4N8S128D64", "B1N2S4D8"]
[[block]]
op = "nrc_grad"
[block.axes]
soc = "A2"
norm_type = [0, 2]
norm_added_type = [1]
rope_type = ["none", "half"]
dtype = "float16"
shape = ["B2N4Sq64Sk48Seq16Sek8D32"]
"""


@pytest.fixture(scope="module")
def sweep_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("sweep") / "parts.toml"
    path.write_text(SWEEP)
    return path


@pytest.fixture(scope="module")
def sweep(sweep_file):
    return parse_sweep(SWEEP, str(sweep_file), ref=str(sweep_file))


@pytest.fixture(scope="module")
def whole(sweep, tmp_path_factory):
    path = tmp_path_factory.mktemp("whole") / "whole.h5"
    generate(sweep, sweep.cases(), path)
    return file_content(path)


def test_split_balances_work_and_keeps_sweep_order(sweep):
    cases = sweep.cases()
    parts = split(cases, 4)
    assert sorted(c.id for p in parts for c in p) == sorted(c.id for c in cases)
    order = {c.id: i for i, c in enumerate(cases)}
    for p in parts:
        assert [order[c.id] for c in p] == sorted(order[c.id] for c in p)
    big = [sum(c.params["B"] == 4 for c in p if c.op == "rope_grad") for p in parts]
    assert max(big) - min(big) <= 1                 # the large cases spread over the parts
    assert split(cases, 4) == parts                 # deterministic


@pytest.mark.slow
def test_jobs_2_writes_parts_that_the_index_links_and_pack_joins(sweep, whole, tmp_path):
    out = tmp_path / "j2.h5"
    summary = generate(sweep, sweep.cases(), out, jobs=2)
    assert summary.cases == len(whole) and summary.parts == 8
    assert file_content(out) == whole
    with goldens.open(out) as gf:
        assert gf.complete and gf.case_ids() == list(whole)
        assert [os.path.basename(p) for p in gf.part_files] == [f"part-{k}-of-8.h5" for k in range(1, 9)]
        rows = gf.summary()
        assert [r.case_id for r in rows] == list(whole) and all(r.data_bytes > 0 for r in rows)
        assert os.path.getsize(out) < sum(r.stored_bytes for r in rows) / 20   # links, not data
    assert not os.path.exists(os.path.join(parts_dir(out), "plan.json"))
    packed = tmp_path / "self.h5"
    goldens.pack(out, packed)
    assert file_content(packed) == whole
    with goldens.open(packed) as gf:
        assert gf.part_files == [] and gf.complete
        assert [r.case_id for r in gf.summary()] == list(whole)
    os.rename(parts_dir(out), str(out) + ".moved")     # the index without its parts
    with goldens.open(out) as gf:
        case = gf[gf.case_ids()[0]]                       # its metadata come from the index
        assert case.input_names
        with pytest.raises(goldens.GoldenFileError, match="no such file"):
            case.inputs[case.input_names[0]].read()


def _start(args, tmp_path):
    return subprocess.Popen([sys.executable, "-m", "refspec", *map(str, args)], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)


def _children(pid: int) -> list[int]:
    kids = []
    for task in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{task}/children") as fh:
            kids += [int(k) for k in fh.read().split()]
    return kids


def _wait_for_part_file(directory, proc, timeout=60):
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        if os.path.isdir(directory) and any(n.endswith(".h5.part") for n in os.listdir(directory)):
            return
        if proc.poll() is not None:
            pytest.fail(f"the run ended before it could be interrupted: {proc.communicate()}")
        time.sleep(0.05)
    pytest.fail("no part file appeared")


@pytest.mark.slow
def test_ctrl_c_of_the_process_group_then_resume(sweep_file, whole, tmp_path):
    out = tmp_path / "cc.h5"
    args = ["generate", "--sweep", sweep_file, "--jobs", "2", "-o", out]
    proc = _start(args, tmp_path)
    _wait_for_part_file(parts_dir(out), proc)
    os.killpg(proc.pid, signal.SIGINT)                  # what Ctrl-C in a terminal does
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err and "KeyboardInterrupt" not in err, err
    assert lines[0] == (f"refspec: error: interrupted; the cases written so far are in "
                        f"{parts_dir(out)}{os.sep}: run the same command with --resume to continue")
    assert not out.exists()
    written = 0                                          # what the parts kept
    for name in os.listdir(parts_dir(out)):
        if name.startswith("part-"):
            with goldens.open(os.path.join(parts_dir(out), name), allow_incomplete=True) as part:
                written += len(part.case_ids())
    resumed = subprocess.run([sys.executable, "-m", "refspec", *map(str, args), "--resume"],
                             capture_output=True, text=True, cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    if written:                                          # resume keeps them, computes the rest
        assert f"; {written} already present" in resumed.stdout, resumed.stdout
    assert file_content(out) == whole


@pytest.mark.slow
def test_ctrl_c_in_one_process_names_the_part_file(sweep_file, tmp_path):
    out = tmp_path / "one.h5"
    proc = _start(["generate", "--sweep", sweep_file, "-o", out], tmp_path)
    start = time.monotonic()
    while not (tmp_path / "one.h5.part").exists() and time.monotonic() - start < 60:
        time.sleep(0.05)
    time.sleep(0.3)
    os.killpg(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130
    assert err.strip() == (f"refspec: error: interrupted; the cases written so far are in "
                           f"{out}.part: run the same command with --resume to continue")


@pytest.mark.slow
def test_kill_9_of_a_worker_then_resume(sweep_file, whole, tmp_path):
    out = tmp_path / "k.h5"
    args = ["generate", "--sweep", sweep_file, "--jobs", "2", "-o", out]
    proc = _start(args, tmp_path)
    _wait_for_part_file(parts_dir(out), proc)
    workers = [k for k in _children(proc.pid)
               if "spawn_main" in open(f"/proc/{k}/cmdline").read().replace("\0", " ")]
    assert workers
    os.kill(workers[0], signal.SIGKILL)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 2 and len(err.strip().splitlines()) == 1, err
    assert "worker process ended abruptly" in err and "--resume" in err
    assert not out.exists()
    with pytest.raises(goldens.GoldenFileError):
        goldens.open(out)
    resumed = subprocess.run([sys.executable, "-m", "refspec", *map(str, args), "--resume"],
                             capture_output=True, text=True, cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert file_content(out) == whole


def test_resume_keeps_the_recorded_split(sweep, tmp_path):
    out = tmp_path / "r.h5"
    cases = sweep.cases()
    os.makedirs(parts_dir(out))
    from refspec.goldens.engine import _plan
    _plan(cases, parts_dir(out), 3, resume=False)        # an interrupted run's plan
    with pytest.raises(GenerateError, match="split other cases"):
        generate(sweep, cases[:-1], out, jobs=2, resume=True)
    with pytest.raises(GenerateError, match="resume it with --jobs 2 or more"):
        generate(sweep, cases, out, jobs=1, resume=True)
    summary = generate(sweep, cases, out, jobs=2, resume=True)
    assert summary.parts == 3 and summary.cases == len(cases)


@pytest.mark.slow
def test_dask_cluster_writes_the_same_file(sweep, whole, tmp_path):
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as cluster:
        out = tmp_path / "dask.h5"
        summary = generate(sweep, sweep.cases(), out, scheduler=cluster.scheduler_address)
    assert summary.parts == 8
    assert file_content(out) == whole


def test_a_part_file_too_damaged_to_read_is_written_again_on_resume(sweep, whole, tmp_path):
    """A worker killed before HDF5 wrote a readable file (the first moments of a part) leaves a
    .part that cannot be opened: resume writes that part again, the others continue."""
    out = tmp_path / "d.h5"
    cases = sweep.cases()
    directory = parts_dir(out)
    os.makedirs(directory)
    from refspec.goldens.engine import _plan
    plan = _plan(cases, directory, 4, resume=False)
    with open(goldens.part_path(plan[1][0]), "wb") as fh:      # what the kill left behind
        fh.write(b"\x89HDF\r\n\x1a\n" + bytes(40))
    summary = generate(sweep, cases, out, jobs=2, resume=True)
    assert summary.cases == len(cases)
    assert file_content(out) == whole
    one = tmp_path / "one.h5"                                   # in one process alike
    with open(goldens.part_path(one), "wb") as fh:
        fh.write(b"\x89HDF\r\n\x1a\n" + bytes(40))
    assert generate(sweep, cases, one, jobs=1, resume=True).cases == len(cases)
    assert file_content(one) == whole


def test_an_index_left_half_written_is_written_again_on_resume(sweep, whole, tmp_path,
                                                                 monkeypatch):
    """A run stopped while it wrote its index (every part complete, ``OUT.part`` half
    written, the plan still there) is finished by the same command with --resume; a
    ``.part`` with no plan beside it is a run of one process, refused."""
    from refspec.goldens import shards
    out = tmp_path / "i.h5"
    real = shards.write_index

    def stopped(out_path, *args, **kwargs):
        with open(goldens.part_path(out_path), "wb") as fh:
            fh.write(b"\x89HDF half")
        raise KeyboardInterrupt

    monkeypatch.setattr(shards, "write_index", stopped)
    with pytest.raises(KeyboardInterrupt):
        generate(sweep, sweep.cases(), out, jobs=2)
    monkeypatch.setattr(shards, "write_index", real)
    assert os.path.exists(goldens.part_path(out)) and not os.path.exists(out)
    generate(sweep, sweep.cases(), out, jobs=2, resume=True)
    assert file_content(out) == whole

    lone = tmp_path / "lone.h5"
    with open(goldens.part_path(lone), "wb") as fh:
        fh.write(b"\x89HDF")
    with pytest.raises(GenerateError, match="interrupted run in one process"):
        generate(sweep, sweep.cases(), lone, jobs=2, resume=True)
