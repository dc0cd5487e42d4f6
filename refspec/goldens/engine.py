"""The generation engine: sweep cases -> one golden HDF5 file (docs/sweeps.md, "Generating").

- ``jobs=1``: this process builds every case (``refspec.goldens.cases.build_case``, large
  cases with one thread per CPU) and writes ``OUT.h5`` through
  ``refspec.goldens.GoldenWriter`` (``OUT.h5.part`` until complete).
- ``jobs=N`` or a Dask ``scheduler``: the cases are split into parts of about equal work
  (``split``, each part in sweep order); each part is one task that builds its cases and
  writes them into its own part file ``OUT.h5.parts/part-K-of-P.h5`` with the same writer, so
  no arrays travel between processes (``refspec.goldens.executors``). When every part is
  complete, ``OUT.h5`` is written: an index whose cases are links into the part files
  (``refspec.goldens.shards.write_index``), read like any golden file;
  ``refspec pack`` makes a self-contained copy.

Every case is built the same way whatever ``jobs`` is, so the datasets are the same bits. An
interrupted run leaves ``OUT.h5.part`` or ``OUT.h5.parts/`` with the cases written so far and
``complete`` false; ``resume`` continues it: each part where it stopped, under the split recorded
in ``OUT.h5.parts/plan.json``. On Ctrl-C the parts under way stop at their next case (the file
``OUT.h5.parts/stop`` tells them to, which also reaches workers on other machines).
"""

from __future__ import annotations

import json
import os
import time
from contextlib import closing
from dataclasses import dataclass, field
from math import prod

from .. import goldens, ops
from . import executors, shards
from .atomic import OutputLock, write_text_atomic
from .cases import build_case, probe, regenerate_command
from .format import parts_dir
from .sweep import Case, Sweep, SweepError

__all__ = ["GenerateError", "GenerateInterrupted", "Summary", "Run", "check_expectations", "generate",
           "split", "parts_dir", "CASE_COST", "check_memory", "memory_needed", "MEMORY_PER_ELEMENT"]


class GenerateError(SweepError):
    """A case that contradicts its block's ``expect`` (or cannot be built)."""


class GenerateInterrupted(KeyboardInterrupt):
    """Ctrl-C: ``partial`` names what holds the cases written so far (None: nothing yet)."""

    def __init__(self, partial: str | None):
        super().__init__(partial)
        self.partial = partial if partial and os.path.exists(partial) else None


@dataclass
class Summary:
    """What a generate run did."""

    path: str
    cases: int = 0           # cases written by this run
    negative: int = 0        # of which negative
    skipped: int = 0         # already present (resume)
    nbytes: int = 0          # logical bytes of the arrays written by this run
    file_bytes: int = 0      # size of the finished file (with its part files)
    seconds: float = 0.0
    parts: int = 0           # part files (a --jobs run)
    stopped: bool = False    # told to stop before its last case

    def line(self) -> str:
        mb = self.nbytes / 1e6
        where = self.path + (f" ({self.parts} part files in {self.path}.parts/)" if self.parts else "")
        text = (f"wrote {self.cases} cases ({self.negative} negative) to {where}: "
                f"{mb:.1f} MB of arrays, {self.file_bytes / 1e6:.1f} MB on disk, "
                f"{self.seconds:.1f} s")
        if self.skipped:
            text += f"; {self.skipped} already present"
        return text


def check_expectations(sweep: Sweep, cases: list[Case]) -> dict:
    """Probe every case's validation (no arithmetic) and check the block's ``expect``.

    Returns {case id: AclnnError or None}; raises GenerateError on the first case whose
    outcome contradicts ``expect = "accept"`` or ``"reject"``.
    """
    outcome = {}
    for case in cases:
        err = probe(case.params)
        outcome[case.id] = err
        expect = sweep.block_of(case.id).expect if case.id in sweep else "any"
        if expect == "accept" and err is not None:
            raise GenerateError(f"case {case.id}: its block expects the profile to accept it, "
                                f"but the spec raises {err.code} ({err})")
        if expect == "reject" and err is None:
            raise GenerateError(f"case {case.id}: its block expects the profile to reject it, "
                                "but the spec accepts it")
    return outcome


# --- memory -------------------------------------------------------------------------------------

#: the memory computing a case takes per input element, at most (peak resident size of building
#: the full sweep's largest cases: 22 bytes for RotaryPositionEmbeddingGrad B1N64S8192D128 in
#: bfloat16, 14.5 in float32, 17 for its largest NormRopeConcatBackward case)
MEMORY_PER_ELEMENT = 24


def memory_needed(case: Case) -> int:
    """About how many bytes computing ``case`` takes at most, from its planned input shapes
    (no arithmetic, nothing allocated): ``MEMORY_PER_ELEMENT`` per input element."""
    plan = ops.get(case.op).generation.plan(case.params)
    return MEMORY_PER_ELEMENT * sum(prod(t.shape) for t in plan.values())


def machine_memory() -> int:
    """The machine's physical memory in bytes (0 where the system does not say)."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return 0


def check_memory(cases: list[Case], available: int | None = None) -> None:
    """``GenerateError`` naming the first case that would need more than ``available`` bytes
    (default: the machine's memory), before anything is allocated or written."""
    available = machine_memory() if available is None else available
    if not available:
        return
    for case in cases:
        need = memory_needed(case)
        if need > available:
            raise GenerateError(
                f"case {case.id}: computing it needs about {_gib(need)} of memory "
                f"({need // MEMORY_PER_ELEMENT} input elements, about {MEMORY_PER_ELEMENT} bytes "
                f"each), more than the {_gib(available)} of this machine; leave it out of the "
                "selection (--case, --where, a sweep of smaller shapes)")


def _gib(n: int) -> str:
    return f"{n / (1 << 30):.1f} GiB"


# --- the run in this process --------------------------------------------------------------------

@dataclass
class Run:
    """A generator run: the sweep's identity (what ``--resume`` and ``merge`` check), the data
    seed the cases were made with, and the writer's settings; what every writing task needs.
    ``Run.of(sweep, ...)`` makes one, ``run.generate(cases, out, ...)`` writes the cases."""

    sweep_name: str
    sweep_definition: str
    sweep_ref: str
    seed: int
    compression: str = goldens.DEFAULT_COMPRESSION
    extra_attrs: dict = field(default_factory=dict)

    @classmethod
    def of(cls, sweep: Sweep, seed: int | None = None,
           compression: str = goldens.DEFAULT_COMPRESSION, extra_attrs: dict | None = None):
        """The run of ``sweep`` with the data seed ``seed`` (default: the sweep's), the
        compression of its datasets and further root attributes (a tier, a shard label)."""
        return cls(sweep.name, sweep.definition, sweep.ref,
                   sweep.seed if seed is None else int(seed), compression, dict(extra_attrs or {}))

    def writer(self, path, resume: bool, force: bool, **attrs) -> goldens.GoldenWriter:
        return goldens.GoldenWriter(path, sweep_name=self.sweep_name,
                                    sweep_definition=self.sweep_definition, sweep_seed=self.seed,
                                    compression=self.compression, resume=resume, force=force,
                                    extra_attrs={**self.extra_attrs, **attrs})


def _write(run: Run, writer, cases: list[Case], threads: int, summary: Summary, progress=None,
           stop=None) -> bool:
    """Build and write the cases the writer lacks; False when ``stop()`` said to stop."""
    for case in cases:
        if writer.has_case(case.id):
            continue
        if stop is not None and stop():
            return False
        data = build_case(case, threads)
        data.regenerate = regenerate_command(case, run.sweep_ref, run.seed)
        writer.write_case(data)
        summary.cases += 1
        summary.negative += data.negative
        if progress:
            progress(1)
    return True


def _generate_here(run: Run, cases, out, resume, force, progress, summary) -> None:
    if resume and os.path.exists(os.path.join(parts_dir(out), "plan.json")):
        raise GenerateError(f"{parts_dir(out)}{os.sep} holds an interrupted run in parts: resume "
                            "it with --jobs 2 or more, or start over with --force")
    with run.writer(out, resume, force) as writer:
        summary.skipped = sum(writer.has_case(c.id) for c in cases)
        if progress and summary.skipped:
            progress(summary.skipped)
        _write(run, writer, cases, os.cpu_count() or 1, summary, progress)
        summary.nbytes = writer.bytes_written


# --- the run in parts ---------------------------------------------------------------------------

#: the work of a case beyond its elements, in elements (HDF5 objects, attributes, Python)
CASE_COST = 1 << 15


def _cost(case: Case) -> int:
    plan = ops.get(case.op).generation.plan(case.params)
    return CASE_COST + sum(prod(t.shape) for t in plan.values())


def split(cases: list[Case], parts: int) -> list[list[Case]]:
    """``cases`` in ``parts`` groups of about equal work (planned elements plus a cost per
    case), each group in the cases' order."""
    return [[cases[i] for i in g] for g in executors.balance([_cost(c) for c in cases], parts)]


@dataclass
class _Part:
    """One task: write ``cases`` into the part file ``path`` (``label`` "K/P")."""

    run: Run
    path: str
    label: str
    cases: list
    stop_file: str


def _write_part(part: _Part) -> Summary:
    """Run in a worker process (or on a Dask worker): build and write one part, resuming its
    file if it exists (the writer checks every case it finds and writes a damaged one again);
    stops at a case boundary once ``part.stop_file`` exists or the process that started the
    worker has ended."""
    summary = Summary(path=part.path)
    resume = os.path.exists(part.path) or os.path.exists(goldens.part_path(part.path))
    with part.run.writer(part.path, resume, False, part=part.label) as writer:
        summary.skipped = sum(writer.has_case(c.id) for c in part.cases)
        summary.stopped = not _write(
            part.run, writer, part.cases, 1, summary,
            stop=lambda: os.path.exists(part.stop_file) or executors.parent_gone())
        summary.nbytes = writer.bytes_written
        if summary.stopped:
            writer.abort()
    return summary


def _plan(cases: list[Case], directory: str, parts: int, resume: bool) -> list[tuple[str, list]]:
    """The split of a run into part files: recorded in ``plan.json`` by the first run and kept
    by ``resume``, so each part continues where it stopped."""
    plan_path = os.path.join(directory, "plan.json")
    by_id = {c.id: c for c in cases}
    if resume and os.path.exists(plan_path):
        with open(plan_path, encoding="utf-8") as fh:
            recorded = json.load(fh)["parts"]
        ids = [cid for p in recorded for cid in p["cases"]]
        if sorted(ids) != sorted(by_id):
            raise GenerateError(f"{directory}: the interrupted run split other cases into its "
                                f"{len(recorded)} parts; resume with the same sweep, tier, filters "
                                "and seed, or start over with --force")
        return [(os.path.join(directory, p["file"]), [by_id[c] for c in p["cases"]]) for p in recorded]
    groups = split(cases, parts)
    n = len(groups)
    planned = [(f"part-{k:0{len(str(n))}d}-of-{n}.h5", g) for k, g in enumerate(groups, 1)]
    write_text_atomic(plan_path, json.dumps(
        {"parts": [{"file": f, "cases": [c.id for c in g]} for f, g in planned]}, indent=1) + "\n")
    return [(os.path.join(directory, f), g) for f, g in planned]


def _generate_parts(run: Run, cases, out, jobs, scheduler, resume, force, progress) -> Summary:
    """The run in parts; the output's lock is held from before anything is changed (a stop
    file, a part, the plan) until ``out`` is written."""
    summary = Summary(path=out)
    if os.path.exists(out) and not (resume or force):
        raise goldens.GoldenFileExistsError("output exists; use --force to replace it", out)
    with OutputLock(out):
        part = goldens.part_path(out)
        if resume and os.path.exists(part):
            if not os.path.exists(os.path.join(parts_dir(out), "plan.json")):
                raise GenerateError(f"{part} is an interrupted run in one process: resume it "
                                    "with --jobs 1, or start over with --force")
            os.remove(part)       # the index a killed run was writing: written again at the end
        if os.path.exists(out) and resume:
            with goldens.open(out) as gf:
                if set(c.id for c in cases) <= set(gf.case_ids()):
                    summary.skipped = len(cases)
                    return summary
            raise GenerateError(f"{out}: complete, but without some of the selected cases; "
                                "generate them into another file, or start over with --force")
        return _run_parts(run, cases, out, jobs, scheduler, resume, force, progress)


def _clear_parts(directory: str, force: bool) -> None:
    """The parts folder of a run about to start: emptied of an earlier run's parts and plan
    with ``force``, without a stop file (the parts' lock files stay: a worker of an earlier
    run that still writes a part keeps it, and the new run's worker is refused)."""
    if force and os.path.isdir(directory):
        for name in os.listdir(directory):
            if (name.startswith("part-") and not name.endswith(".lock")) \
                    or name in ("plan.json", "stop"):
                os.remove(os.path.join(directory, name))
    os.makedirs(directory, exist_ok=True)
    stop_file = os.path.join(directory, "stop")
    if os.path.exists(stop_file):
        os.remove(stop_file)


def _run_parts(run: Run, cases, out, jobs, scheduler, resume, force, progress) -> Summary:
    summary = Summary(path=out)
    directory = parts_dir(out)
    _clear_parts(directory, force)
    stop_file = os.path.join(directory, "stop")
    workers = executors.worker_count(scheduler) if scheduler else jobs
    plan = _plan(cases, directory, 4 * workers, resume)
    tasks = [_Part(run, path, f"{k}/{len(plan)}", group, stop_file)
             for k, (path, group) in enumerate(plan, 1)]
    finished = []
    results = executors.run(_write_part, tasks, jobs=jobs, scheduler=scheduler,
                            on_interrupt=lambda: open(stop_file, "w").close())
    try:
        with closing(results):
            for i, result in results:
                for key in ("cases", "negative", "skipped", "nbytes"):
                    setattr(summary, key, getattr(summary, key) + getattr(result, key))
                if progress:
                    progress(len(tasks[i].cases))
                if not result.stopped:
                    finished.append(i)
    except executors.WorkerLost as exc:
        raise GenerateError(f"{exc}; the cases written so far are in {directory}{os.sep}, "
                            "--resume continues (--jobs 1 computes in this process and shows the "
                            "cause)") from None
    if len(finished) != len(tasks):
        raise GenerateInterrupted(directory + os.sep)
    shards.write_index(out, [t.path for t in tasks], [c.id for c in cases],
                       {**_root_of(tasks[0].path), **run.extra_attrs})
    os.remove(os.path.join(directory, "plan.json"))
    summary.parts = len(tasks)
    return summary


def _root_of(part: str) -> dict:
    """The root attributes of a part file that describe the whole run."""
    with goldens.open(part) as gf:
        return {k: v for k, v in gf.attrs.items()
                if k not in ("complete", "writing", "part", "created")}


def generate(sweep: Sweep | Run, cases: list[Case], out, *, jobs: int = 1,
             scheduler: str | None = None, resume: bool = False, force: bool = False,
             progress=None) -> Summary:
    """Write ``cases`` of ``sweep`` to ``out`` (see the module docstring); ``Run.of(sweep,
    ...)`` in place of the sweep gives a data seed, compression or root attributes other than
    the sweep's defaults. ``progress(n)`` is called as cases are written or skipped. A case
    that would need more than the machine's memory is refused before anything is written
    (``check_memory``). Raises ``GenerateInterrupted`` on Ctrl-C."""
    start = time.perf_counter()
    run = sweep if isinstance(sweep, Run) else Run.of(sweep)
    out = os.fspath(out)
    check_memory(cases)
    here = jobs <= 1 and not scheduler
    try:
        if here:
            summary = Summary(path=out)
            _generate_here(run, cases, out, resume, force, progress, summary)
        else:
            summary = _generate_parts(run, cases, os.path.abspath(out), jobs, scheduler, resume,
                                      force, progress)
            summary.path = out
    except GenerateInterrupted:
        raise
    except KeyboardInterrupt:
        raise GenerateInterrupted(goldens.part_path(out) if here
                                  else parts_dir(os.path.abspath(out)) + os.sep) from None
    summary.file_bytes = sum(os.path.getsize(p) for p in [out] + _parts_of(out) if os.path.exists(p))
    summary.seconds = time.perf_counter() - start
    return summary


def _parts_of(out: str) -> list[str]:
    if not os.path.exists(out):
        return []
    with goldens.open(out) as gf:
        return gf.part_files
