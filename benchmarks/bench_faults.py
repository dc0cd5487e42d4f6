"""Faults at many moments (the long form of tests/faults/): for each fault, how many tries, how
each ended, and whether the run that followed gave the same bits as an uninterrupted one.

    python benchmarks/bench_faults.py                 # 20 moments per signal fault (about 30 min)
    python benchmarks/bench_faults.py --tries 3       # a quick look
    python benchmarks/bench_faults.py --only sigkill-generate-j2,hostile

The faults, on the smoke sweep's default tier (every operator's cases):

- ``sigkill-generate-jN`` / ``sigint-generate-jN``: SIGKILL / SIGINT (Ctrl-C) of the process
  group of `generate --jobs N` at a moment drawn uniformly over an uninterrupted run's time,
  then `generate --resume`; SIGINT must end in one line (exit 130).
- ``sigkill-main-j2``: SIGKILL of the main process alone; its workers must end, then
  `--resume`.
- ``full-disk-generate-jN``: a tmpfs with room for a random share of the output (and the 16 MiB
  the writers keep free): one line naming the file, exit 2; the tmpfs made larger, `--resume`.
- ``sigkill-export-jN`` / ``full-disk-export``: the same for `export`; afterwards every file
  there is whole, and `export --force` gives the reference export's bytes.
- ``sigkill-compare``: `compare GOLDEN GOLDEN --json` killed: the report is whole or absent;
  the next compare works.
- ``concurrent``: a second `generate` (--force or --resume, --jobs 1 or 2) on an output being
  written (the standard sweep's quick tier, a run of several seconds): refused in one line
  naming the file; the first finishes, its file verified whole.
- ``hostile``: every file of tests/hostile_goldens.py through `show`, `show --verify`,
  `export` and `compare` (the file against itself): one line, exit 2.

"Bit-identical" compares every case's metadata and every dataset's bytes, in file order
(tests/golden_files.py). "Kept" is the number of cases the resume found sound and did not
compute again. The script asserts nothing; it prints one table.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import signal
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))

from fault_runs import (LONG_RUN, LONG_RUN_CASES, can_mount, children, hurt,  # noqa: E402
                        one_line, run, same_content, small_filesystem, start, tree_digest,
                        wait_gone)
from golden_files import file_content  # noqa: E402
from hostile_goldens import CATALOGUE, command_args, hostile_file, sound_file  # noqa: E402

KEPT = re.compile(r"; (\d+) already present")


class Tally:
    """The outcomes of one fault's tries."""

    def __init__(self, name: str, bits: bool = True):
        self.name, self.tries, self.before, self.lines, self.same = name, 0, 0, 0, 0
        self.kept, self.failures, self.bits, self.slowest = [], [], bits, None
        self.starting = 0          # Ctrl-C while the interpreter was still importing
        self.durations = []        # how long runs that ended before their fault took

    def row(self) -> str:
        kept = f"{sum(self.kept) / len(self.kept):.0f}" if self.kept else "-"
        bad = "; ".join(self.failures[:3]) or "none"
        if self.slowest is not None:
            bad += f" (the last worker ended {self.slowest:.1f} s after its parent)"
        if self.starting:
            bad += (f" ({self.starting} Ctrl-C while Python was still starting, before "
                    "refspec's code ran: no message or Python's KeyboardInterrupt traceback, "
                    "nothing written)")
        same = f"{self.same}/{self.tries}" if self.bits else "-"
        return (f"| {self.name} | {self.tries} | {self.before} | {self.lines} | {same} | "
                f"{kept} | {bad} |")


def kept_of(stdout: str) -> int:
    found = KEPT.search(stdout)
    return int(found.group(1)) if found else 0


def moment(t: Tally, seconds: float, rnd) -> float:
    """A moment drawn uniformly over the run's time: the reference run's, or the shortest run
    seen since (the machine's load changes while the benchmark runs)."""
    return rnd.uniform(0.02, 1.0) * min([seconds, *t.durations])


def hurt_timed(t: Tally, args, seconds: float, rnd, sig=signal.SIGKILL):
    """``hurt`` at a random moment; a run that ended first teaches how long runs take now."""
    t0 = time.monotonic()
    code, err, workers, ended = hurt(args, moment(t, seconds, rnd), sig)
    if ended:
        t.before += 1
        t.durations.append(time.monotonic() - t0)
    return code, err, ended


def signal_generate(t: Tally, ref, tmp, jobs, sig, rnd):
    path, content, seconds = ref[jobs]
    out = os.path.join(tmp, f"{t.name}-{t.tries}.h5")
    args = ("generate", "--jobs", jobs, "-o", out)
    code, err, ended = hurt_timed(t, args, seconds, rnd, sig)
    if not ended and sig == signal.SIGINT:
        if code in (0, -signal.SIGINT) and same_content(out, content):
            t.before += 1          # Ctrl-C as the run was ending: it had written everything
        elif code == 130 and one_line(err, "interrupted"):
            t.lines += 1
        elif code == -signal.SIGINT and (not err.strip() or
                                         err.rstrip().endswith("KeyboardInterrupt")):
            t.starting += 1        # the command's own handler (exit 130) was not running yet
        else:
            t.failures.append(f"Ctrl-C: exit {code}: {err.strip()[-160:]}")
    if not ended and sig == signal.SIGKILL and os.path.exists(out) and not same_content(out,
                                                                                         content):
        t.failures.append(f"{out} looks complete after a kill")
    done = run(*args, "--resume")
    t.kept.append(kept_of(done.stdout))
    _judge(t, done, out, content)


def _judge(t: Tally, done, out, content) -> None:
    if done.returncode != 0:
        t.failures.append(f"resume exit {done.returncode}: {done.stderr.strip()[-160:]}")
    elif same_content(out, content):
        t.same += 1
    else:
        t.failures.append(f"{out}: not the same bits")


def main_kill(t: Tally, ref, tmp, rnd):
    """SIGKILL of the main process alone, once its workers run, at a random moment after."""
    _, content, seconds = ref[2]
    out = os.path.join(tmp, f"{t.name}-{t.tries}.h5")
    args = ("generate", "--jobs", 2, "-o", out)
    proc = start(*args)
    workers, started = [], time.monotonic()
    while len(workers) < 3 and proc.poll() is None and time.monotonic() < started + 120:
        workers = children(proc.pid)                 # two workers and a resource tracker
        time.sleep(0.02)
    time.sleep(rnd.uniform(0.0, 0.8) * max(min([seconds, *t.durations])
                                           - (time.monotonic() - started), 0.0))
    if proc.poll() is not None:
        t.before += 1
        t.durations.append(time.monotonic() - started)
    else:
        os.kill(proc.pid, signal.SIGKILL)
    proc.communicate()
    t0 = time.monotonic()
    left = wait_gone(workers, 120)
    if left:
        t.failures.append(f"workers {left} outlived their parent")
    else:
        t.lines += 1               # counted here: every worker ended
        t.slowest = max(t.slowest or 0.0, time.monotonic() - t0)
    done = run(*args, "--resume")
    _judge(t, done, out, content)


def full_disk_generate(t: Tally, ref, tmp, jobs, rnd):
    from refspec.goldens.atomic import SPACE_RESERVE
    path, content, _ = ref[jobs]
    size = _size(path)
    mnt = os.path.join(tmp, f"{t.name}-{t.tries}")
    room = SPACE_RESERVE + int(rnd.uniform(0.05, 0.95) * size)
    with small_filesystem(mnt, f"{room // 1024}k") as grow:
        out = os.path.join(mnt, "g.h5")
        args = ("generate", "--jobs", jobs, "-o", out)
        done = run(*args)
        if done.returncode == 0:
            t.before += 1
        elif done.returncode == 2 and one_line(done.stderr, mnt, "no space left on the device"):
            t.lines += 1
        else:
            t.failures.append(f"exit {done.returncode}: {done.stderr.strip()[:160]}")
        grow(f"{(SPACE_RESERVE + 4 * size) // 1024}k")
        again = run(*args, "--resume")
        t.kept.append(kept_of(again.stdout))
        _judge(t, again, out, content)


def _size(path) -> int:
    base = os.path.dirname(path)
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(base) for f in fs
               if os.path.relpath(os.path.join(d, f), base).startswith(os.path.basename(path)))


def signal_export(t: Tally, ref, exported, tmp, jobs, rnd):
    path = ref[1][0]
    want, seconds = exported
    out = os.path.join(tmp, f"{t.name}-{t.tries}")
    args = ("export", path, "-o", out, "--jobs", jobs)
    hurt_timed(t, args, seconds, rnd)
    if os.path.exists(out):
        got = tree_digest(out)
        if any(want.get(p) != h for p, h in got.items() if not p.endswith(".tmp")):
            t.failures.append("a file half-written")
    _export_again(t, args, out, want)


def _export_again(t: Tally, args, out, want) -> None:
    done = run(*args, "--force")
    got = tree_digest(out) if done.returncode == 0 else None
    if got == want:
        t.same += 1
    else:
        t.failures.append(f"export --force: exit {done.returncode}, "
                          f"{'other bytes' if got else done.stderr.strip()[:120]}")


def full_disk_export(t: Tally, ref, exported, tmp, rnd):
    path = ref[1][0]
    want, _ = exported
    size = sum(os.path.getsize(os.path.join(exported_dir, p)) for p in want)
    mnt = os.path.join(tmp, f"{t.name}-{t.tries}")
    with small_filesystem(mnt, f"{int(rnd.uniform(0.05, 0.95) * size) // 1024 + 8}k") as grow:
        out = os.path.join(mnt, "out")
        done = run("export", path, "-o", out)
        if done.returncode == 0:
            t.before += 1
        elif one_line(done.stderr, out, "no space left on the device") and "--resume" not in \
                done.stderr:
            t.lines += 1
        else:
            t.failures.append(f"exit {done.returncode}: {done.stderr.strip()[:160]}")
        grow(f"{4 * size // 1024 + 65536}k")   # small files take whole blocks
        _export_again(t, ("export", path, "-o", out), out, want)


def kill_compare(t: Tally, ref, tmp, rnd, seconds):
    path = ref[1][0]
    report = os.path.join(tmp, f"{t.name}-{t.tries}.json")
    args = ("compare", path, path, "--json", report)
    hurt_timed(t, args, seconds, rnd)
    if os.path.exists(report):
        try:
            json.load(open(report))
        except ValueError:
            t.failures.append("a report half-written")
    done = run(*args)
    try:
        ok = done.returncode == 0 and bool(json.load(open(report)))
    except (OSError, ValueError):
        ok = False
    t.same += ok
    if not ok:
        t.failures.append(f"compare again: exit {done.returncode}")


def concurrent(t: Tally, tmp, jobs, second):
    out = os.path.join(tmp, f"{t.name}-{t.tries}.h5")
    args = ("generate", *LONG_RUN, "--jobs", jobs, "-o", out)
    first = start(*args)
    deadline = time.monotonic() + 60
    while not os.path.exists(out + ".lock") and time.monotonic() < deadline:
        time.sleep(0.02)
    other = run(*args, second)
    _, err = first.communicate()
    if first.poll() is not None and os.path.exists(out + ".lock"):
        t.failures.append("lock file left")
    if other.returncode == 2 and one_line(other.stderr, out, "another process"):
        t.lines += 1
    else:
        t.failures.append(f"second run: exit {other.returncode}: {other.stderr.strip()[:120]}")
    verified = run("show", "--verify", out)
    if first.returncode == 0 and verified.returncode == 0 and \
            f"{LONG_RUN_CASES} case(s)" in verified.stdout:
        t.same += 1
    else:
        t.failures.append(f"first run: exit {first.returncode}: {err.strip()[-120:]}")


def hostile(tally_of, tmp):
    sound = sound_file(os.path.join(tmp, "sound.h5"))
    for entry in CATALOGUE:
        path = hostile_file(sound, entry, os.path.join(tmp, "hostile"))
        for command in entry.commands:
            t = tally_of(f"hostile: {entry.name}", bits=False)
            t.tries += 1
            done = run(*command_args(command, path, entry, os.path.join(tmp, "hostile-out")))
            if done.returncode == 2 and one_line(done.stderr, path, *entry.fragments):
                t.lines += 1
            else:
                t.failures.append(f"{command[0]}: exit {done.returncode}: "
                                  f"{done.stderr.strip()[-120:]}")


def references(tmp):
    ref = {}
    for jobs in (1, 2):
        path = os.path.join(tmp, f"ref{jobs}.h5")
        t0 = time.monotonic()
        done = run("generate", "--jobs", jobs, "-o", path)
        if done.returncode:
            raise SystemExit(done.stderr)
        ref[jobs] = (path, file_content(path), time.monotonic() - t0)
    return ref


exported_dir = ""


def main(argv=None):
    global exported_dir
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tries", type=int, default=20, help="moments per signal fault")
    ap.add_argument("--dir", default=None, help="work in this directory (default: a temporary one)")
    ap.add_argument("--only", default=None, help="comma-separated fault names")
    args = ap.parse_args(argv)
    tmp = tempfile.mkdtemp(prefix="robust-faults-", dir=args.dir)
    rnd = random.Random(2026)
    tallies: dict = {}

    def tally_of(name, bits=True):
        return tallies.setdefault(name, Tally(name, bits))

    def wanted(name):
        return args.only is None or any(name.startswith(o) for o in args.only.split(","))

    load = os.getloadavg()[0]
    t_start = time.monotonic()
    ref = references(tmp)
    exported_dir = os.path.join(tmp, "exported")
    t0 = time.monotonic()
    run("export", ref[1][0], "-o", exported_dir)
    exported = (tree_digest(exported_dir), time.monotonic() - t0)
    t0 = time.monotonic()
    run("compare", ref[1][0], ref[1][0], "--json", os.path.join(tmp, "c.json"))
    compare_seconds = time.monotonic() - t0
    plan = []
    for jobs in (1, 2):
        plan += [(f"sigkill-generate-j{jobs}", args.tries,
                  lambda t, j=jobs: signal_generate(t, ref, tmp, j, signal.SIGKILL, rnd)),
                 (f"sigint-generate-j{jobs}", args.tries,
                  lambda t, j=jobs: signal_generate(t, ref, tmp, j, signal.SIGINT, rnd)),
                 (f"sigkill-export-j{jobs}", args.tries,
                  lambda t, j=jobs: signal_export(t, ref, exported, tmp, j, rnd))]
    plan += [("sigkill-main-j2", max(1, args.tries // 2), lambda t: main_kill(t, ref, tmp, rnd)),
             ("sigkill-compare", args.tries,
              lambda t: kill_compare(t, ref, tmp, rnd, compare_seconds))]
    if can_mount():
        plan += [(f"full-disk-generate-j{j}", max(1, args.tries // 2),
                  lambda t, j=j: full_disk_generate(t, ref, tmp, j, rnd)) for j in (1, 2)]
        plan += [("full-disk-export", max(1, args.tries // 2),
                  lambda t: full_disk_export(t, ref, exported, tmp, rnd))]
    for jobs, second in ((1, "--force"), (1, "--resume"), (2, "--force"), (2, "--resume")):
        plan.append((f"concurrent-j{jobs}{second}", max(1, args.tries // 4),
                     lambda t, j=jobs, s=second: concurrent(t, tmp, j, s)))
    for name, tries, fn in plan:
        if not wanted(name):
            continue
        t = tally_of(name)
        for _ in range(tries):
            fn(t)
            t.tries += 1
        print(f"{t.row()}  ({time.monotonic() - t_start:.0f} s)", file=sys.stderr, flush=True)
    if wanted("hostile"):
        hostile(tally_of, tmp)
    print(f"load average {load:.2f} at the start, {os.getloadavg()[0]:.2f} at the end; "
          f"{time.monotonic() - t_start:.0f} s; reference runs: --jobs 1 {ref[1][2]:.1f} s, "
          f"--jobs 2 {ref[2][2]:.1f} s")
    print("| fault | tries | ended before the fault | one clear line (or workers ended) | "
          "then the same bits | cases kept by resume (mean) | failures |")
    print("|---|---|---|---|---|---|---|")
    for t in tallies.values():
        print(t.row())
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
