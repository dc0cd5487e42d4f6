"""The generation engine: sweep cases -> golden HDF5 file (docs/sweeps.md, "Generating").

Cases are computed by :func:`refspec.goldens.cases.build_case`, in this process (``jobs=1``) or in a
pool of spawned worker processes (``jobs>1``); the parent alone writes, always in case order,
so the file's content is the same whatever ``jobs`` is. Writing goes through
:class:`refspec.goldens.GoldenWriter` (``<out>.part`` renamed when complete; ``resume``
continues an interrupted run by skipping the cases already written).
"""

from __future__ import annotations

import multiprocessing
import os
import time
from collections import deque
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass

from .. import goldens
from .cases import build_case, probe, regenerate_command
from .sweep import Case, Sweep, SweepError

__all__ = ["GenerateError", "Summary", "check_expectations", "generate"]


class GenerateError(SweepError):
    """A case that contradicts its block's ``expect`` (or cannot be built)."""


@dataclass
class Summary:
    """What a generate run did."""

    path: str
    cases: int = 0           # cases written by this run
    negative: int = 0        # of which negative
    skipped: int = 0         # already present (resume)
    nbytes: int = 0          # logical bytes of the arrays written by this run
    file_bytes: int = 0      # size of the finished file
    seconds: float = 0.0

    def line(self) -> str:
        mb = self.nbytes / 1e6
        text = (f"wrote {self.cases} cases ({self.negative} negative) to {self.path}: "
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


def _ordered_results(cases: list[Case], jobs: int):
    """build_case results in case order; ``jobs`` > 1 computes them in spawned processes."""
    if jobs <= 1:                       # one process: large cases use every CPU's thread
        threads = os.cpu_count() or 1
        for case in cases:
            yield case, build_case(case, threads)
        return
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=jobs, mp_context=ctx) as pool:
        pending = deque()
        it = iter(cases)
        try:
            for case in it:
                pending.append((case, pool.submit(build_case, case)))
                if len(pending) >= 2 * jobs:
                    break
            while pending:
                case, future = pending.popleft()
                try:
                    result = future.result()
                except BrokenProcessPool:
                    raise GenerateError(f"case {case.id}: a worker process ended abruptly (killed, "
                                        "out of memory, or it could not start); --jobs 1 computes "
                                        "in this process and shows the cause") from None
                nxt = next(it, None)
                if nxt is not None:
                    pending.append((nxt, pool.submit(build_case, nxt)))
                yield case, result
        except BaseException:
            for _, future in pending:
                future.cancel()
            pool.shutdown(wait=True, cancel_futures=True)
            raise


def generate(sweep: Sweep, cases: list[Case], out, *, seed: int | None = None, jobs: int = 1,
             compression: str = goldens.DEFAULT_COMPRESSION, resume: bool = False,
             force: bool = False, progress=None, extra_attrs: dict | None = None) -> Summary:
    """Write ``cases`` of ``sweep`` to ``out``. ``seed`` is the data seed the cases were made
    with (default: the sweep's); ``progress(n)`` is called after each case written or skipped."""
    start = time.perf_counter()
    data_seed = sweep.seed if seed is None else int(seed)
    summary = Summary(path=os.fspath(out))
    with goldens.GoldenWriter(out, sweep_name=sweep.name, sweep_definition=sweep.definition,
                              sweep_seed=data_seed, compression=compression, resume=resume,
                              force=force, extra_attrs=extra_attrs) as writer:
        todo = [c for c in cases if not writer.has_case(c.id)]
        summary.skipped = len(cases) - len(todo)
        if progress and summary.skipped:
            progress(summary.skipped)
        for case, data in _ordered_results(todo, jobs):
            writer.write_case(case.id, **data.writer_kwargs(
                regenerate_command(case, sweep.ref, data_seed)))
            summary.cases += 1
            summary.negative += data.negative
            if progress:
                progress(1)
        summary.nbytes = writer.bytes_written
    summary.file_bytes = os.path.getsize(summary.path) if os.path.exists(summary.path) else 0
    summary.seconds = time.perf_counter() - start
    return summary
