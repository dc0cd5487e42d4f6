"""Fault injection (tests/fault_runs.py): SIGKILL and SIGINT at random moments of generate,
export and compare with --jobs 1 and 2, the main process killed alone, a file system that fills
up, and two runs on one output. Each fault ends in one clear line or a finished run, and the
next run (`--resume`, `export --force`) gives the same bits as an uninterrupted one.
benchmarks/bench_faults.py tries many more moments and counts the outcomes."""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import time

import pytest

from fault_runs import (LONG_RUN, LONG_RUN_CASES, SELECTION, SMOKE_CASES, can_mount, children,
                        hurt, one_line, run, same_content, small_filesystem, start,
                        tree_digest, wait_gone)
from golden_files import file_content

pytestmark = pytest.mark.slow
JOBS = (1, 2)


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """{jobs: (golden path, its content, seconds the run took)} of uninterrupted runs."""
    d = tmp_path_factory.mktemp("reference")
    out = {}
    for jobs in JOBS:
        path = d / f"ref{jobs}.h5"
        t = time.monotonic()
        done = run("generate", *SELECTION, "--jobs", jobs, "-o", path)
        assert done.returncode == 0, done.stderr
        out[jobs] = (path, file_content(path), time.monotonic() - t)
    assert out[1][1] == out[2][1]
    return out


def moments(seed: int, seconds: float, n: int) -> list[float]:
    rnd = random.Random(seed)
    return [rnd.uniform(0.15, 1.0) * seconds for _ in range(n)]


@pytest.mark.parametrize("jobs", JOBS)
def test_sigkill_of_the_process_group_then_resume_is_bit_identical(reference, tmp_path, jobs):
    _, content, seconds = reference[jobs]
    for k, t in enumerate(moments(jobs, seconds, 3)):
        out = tmp_path / f"k{k}.h5"
        args = ("generate", *SELECTION, "--jobs", jobs, "-o", out)
        code, err, _, ended = hurt(args, t)
        assert ended or code == -signal.SIGKILL, err
        if not ended:                         # never a file that looks complete
            assert not out.exists() or same_content(out, content)
        done = run(*args, "--resume")
        assert done.returncode == 0, (t, done.stderr)
        assert same_content(out, content), t


@pytest.mark.parametrize("jobs", JOBS)
def test_sigint_of_the_process_group_is_one_line_then_resume_is_bit_identical(reference,
                                                                               tmp_path, jobs):
    _, content, seconds = reference[jobs]
    for k, t in enumerate(moments(10 + jobs, seconds, 2)):
        out = tmp_path / f"i{k}.h5"
        args = ("generate", *SELECTION, "--jobs", jobs, "-o", out)
        # from the moment the command holds its output (Python's own start, before refspec's
        # code runs, answers Ctrl-C with its traceback: bench_faults.py counts those)
        code, err, _, ended = hurt(args, t / 2, signal.SIGINT, after=f"{out}.lock")
        if not ended and not (code in (0, -signal.SIGINT) and same_content(out, content)):
            assert code == 130 and one_line(err, "interrupted"), (code, err)   # else it had
            # written everything and was ending: Python answers a Ctrl-C while it exits
        assert run(*args, "--resume").returncode == 0
        assert same_content(out, content), t


def test_killing_the_main_process_alone_ends_its_workers(reference, tmp_path):
    """SIGKILL reaches the main process alone: its workers (busy or idle) end within a case."""
    _, content, _ = reference[2]
    out = tmp_path / "m.h5"
    args = ("generate", "--jobs", 2, "-o", out)          # the smoke sweep: a run of seconds
    proc = start(*args)
    workers, deadline = [], time.monotonic() + 120
    while len(workers) < 3 and proc.poll() is None and time.monotonic() < deadline:
        workers = children(proc.pid)                      # two workers and a resource tracker
        time.sleep(0.05)
    time.sleep(0.5)
    assert proc.poll() is None, "the run ended before it was killed"
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=120)
    assert wait_gone(workers, 60) == [], "workers outlived their parent"
    done = run(*args, "--resume")
    assert done.returncode == 0, done.stderr
    whole = file_content(out)
    assert len(whole) == SMOKE_CASES
    assert {c: whole[c] for c in content} == content


@pytest.mark.skipif(not can_mount(), reason="needs root to mount a small tmpfs")
@pytest.mark.parametrize("jobs", JOBS)
def test_a_full_disk_is_one_line_naming_the_file_and_resume_finishes(reference, tmp_path, jobs):
    from refspec.goldens.atomic import SPACE_RESERVE
    path, content, _ = reference[jobs]
    size = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path.parent)
               for f in fs if os.path.relpath(os.path.join(d, f), path.parent).startswith(
                   path.name))
    rnd = random.Random(jobs)
    for k in range(2):
        mnt = tmp_path / f"fs{k}"
        room = SPACE_RESERVE + int(rnd.uniform(0.2, 0.8) * size)
        with small_filesystem(mnt, f"{room // 1024}k") as grow:
            out = mnt / "g.h5"
            args = ("generate", *SELECTION, "--jobs", jobs, "-o", out)
            done = run(*args)
            assert done.returncode == 2, done.stderr
            assert one_line(done.stderr, str(mnt), "no space left on the device", "--resume")
            grow(f"{(SPACE_RESERVE + 4 * size) // 1024}k")
            again = run(*args, "--resume")
            assert again.returncode == 0, again.stderr
            assert same_content(out, content)


@pytest.fixture(scope="module")
def exported(reference, tmp_path_factory):
    path = reference[1][0]
    d = tmp_path_factory.mktemp("exported") / "out"
    assert run("export", path, "-o", d).returncode == 0
    return d, tree_digest(d)


@pytest.mark.parametrize("jobs", JOBS)
def test_a_killed_export_leaves_no_file_half_written_and_force_redoes_it(reference, exported,
                                                                         tmp_path, jobs):
    path = reference[1][0]
    _, want = exported
    t0 = time.monotonic()
    assert run("export", path, "-o", tmp_path / "timed", "--jobs", jobs).returncode == 0
    seconds = time.monotonic() - t0
    for k, t in enumerate(moments(20 + jobs, seconds, 2)):
        out = tmp_path / f"e{k}"
        args = ("export", path, "-o", out, "--jobs", jobs)
        hurt(args, t)
        if out.exists():
            got = tree_digest(out)
            whole = {p: h for p, h in got.items() if not os.path.basename(p).endswith(".tmp")}
            assert all(want[p] == h for p, h in whole.items()), "a file half-written"
        assert run(*args, "--force").returncode == 0
        assert tree_digest(out) == want


@pytest.mark.skipif(not can_mount(), reason="needs root to mount a small tmpfs")
def test_a_full_disk_during_export_names_the_file_and_force_redoes_it(reference, exported,
                                                                      tmp_path):
    path = reference[1][0]
    d, want = exported
    size = sum(os.path.getsize(d / p) for p in want)
    with small_filesystem(tmp_path / "fs", f"{size // 2 // 1024}k") as grow:
        out = tmp_path / "fs" / "out"
        done = run("export", path, "-o", out)
        assert done.returncode == 2
        assert one_line(done.stderr, str(out), "no space left on the device", "export again")
        assert "--shard" not in done.stderr and "--resume" not in done.stderr
        grow("64m")
        assert run("export", path, "-o", out, "--force").returncode == 0
        assert tree_digest(out) == want


def test_a_second_generate_on_the_same_output_is_refused_and_the_first_finishes(tmp_path):
    """A run of several seconds, and a second run on its output while it writes: refused at
    once, naming the file; the first neither destroyed nor stopped."""
    for jobs, second in ((1, "--force"), (2, "--force"), (2, "--resume")):
        out = tmp_path / f"c{jobs}{second}.h5"
        args = ("generate", *LONG_RUN, "--jobs", jobs, "-o", out)
        first = start(*args)
        lock = f"{out}.lock"
        deadline = time.monotonic() + 60
        while not os.path.exists(lock) and time.monotonic() < deadline:
            time.sleep(0.02)
        other = run(*args, second)
        _, err = first.communicate(timeout=600)
        assert first.returncode == 0, err
        assert other.returncode == 2, other.stdout
        assert one_line(other.stderr, str(out), "another process"), other.stderr
        assert not os.path.exists(f"{out}.parts/stop")
        verified = run("show", "--verify", out)
        assert verified.returncode == 0 and f"verified {LONG_RUN_CASES} case(s)" in verified.stdout


def test_extending_a_complete_file_never_takes_it_away(reference, tmp_path):
    """`--resume` with a larger selection than a complete file holds: the complete file stays
    in place, readable, while the new cases are written, and when the run is killed."""
    _, content, _ = reference[1]
    out = tmp_path / "x.h5"
    assert run("generate", *SELECTION, "--dtype", "float32", "-o", out).returncode == 0
    before = file_content(out)
    args = ("generate", *SELECTION, "-o", out, "--resume")
    proc = start(*args)
    while proc.poll() is None:
        assert out.exists()
        time.sleep(0.01)
    assert proc.returncode == 0 and set(file_content(out)) == set(content)
    assert run("generate", *SELECTION, "--dtype", "float32", "-o", out, "--force").returncode == 0
    code, err, _, ended = hurt(args, 2.0)
    assert same_content(out, before) or ended          # killed: the complete file untouched
    assert run(*args).returncode == 0 and set(file_content(out)) == set(content)


def test_a_killed_compare_leaves_no_report_half_written(reference, tmp_path):
    """The golden file judged against its own expected outputs (every output passes)."""
    path = reference[1][0]
    d = path
    report = tmp_path / "r.json"
    t0 = time.monotonic()
    first = run("compare", path, d, "--json", report)
    seconds = time.monotonic() - t0
    assert first.returncode == 0 and json.loads(report.read_text())
    for k, t in enumerate(moments(30, seconds, 2)):
        report = tmp_path / f"r{k}.json"
        hurt(("compare", path, d, "--json", report), t)
        if report.exists():
            json.loads(report.read_text())               # whole, or not there
        assert run("compare", path, d, "--json", report).returncode == 0
        assert json.loads(report.read_text())


def test_a_killed_compare_leaves_no_earlier_report_that_passes_for_its_own(reference, tmp_path):
    """An earlier run's report at the same path (marked by its time) is gone once a compare
    has started: a killed one leaves no report, or its own whole one; the next run removes the
    temporaries the killed ones left."""
    path = reference[1][0]
    report = tmp_path / "r.json"
    t0 = time.monotonic()
    assert run("compare", path, path, "--json", report).returncode == 0
    seconds = time.monotonic() - t0
    earlier = json.loads(report.read_text())
    earlier["judged_at"] = "2000-01-01T00:00:00Z"
    for t in moments(31, seconds, 6):
        report.write_text(json.dumps(earlier))
        proc = start("compare", path, path, "--json", report)
        while report.exists() and proc.poll() is None:        # until the compare has begun
            time.sleep(0.005)
        time.sleep(t / 2)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate(timeout=600)
        if report.exists():                                   # it ended first: its own report
            assert json.loads(report.read_text())["judged_at"] > earlier["judged_at"]
    done = run("compare", path, path, "--json", report)
    assert done.returncode == 0 and json.loads(report.read_text())["judged_at"] > "2000"
    assert [f for f in os.listdir(tmp_path) if f.endswith(".tmp")] == []

