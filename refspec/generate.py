"""The generation engine: sweep cases -> golden HDF5 file (docs/sweeps.md, "Generating").

Cases are computed by :func:`refspec.cases.build_case`, in this process (``jobs=1``) or in a
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
from math import prod

from . import blocked, goldens, transfer
from .cases import build_case, probe, regenerate_command, tensor_plan
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


_SHIP = (None, transfer.MIN_BYTES)     # a worker's (directory, min_bytes) for transfer.ship


def _worker_init(ship_to: str | None, min_bytes: int) -> None:
    """Worker processes: one thread each, and the lowest scheduling priority, below the parent,
    whose writing is the serial part of a run: the workers compute ahead in the CPU time the
    parent leaves (with nice 5 the parent wrote a third slower while the workers shared its CPU).
    Results of at least ``min_bytes`` go back through files in ``ship_to``
    (refspec/transfer.py) when it is given."""
    global _SHIP
    _SHIP = (ship_to, min_bytes)
    blocked.single_threaded()
    try:
        os.nice(19)
    except OSError:
        pass


def _build_and_ship(case: Case):
    return transfer.ship(build_case(case), *_SHIP)


#: results in flight between worker processes and the writer: at most this many bytes (by the
#: planned tensor sizes) beyond one case per worker, and at most 16 cases per worker (a run of
#: cheap cases refills what a costly one drained)
WINDOW_BYTES = 1 << 30
WINDOW_CASES = 16


def _planned_bytes(case: Case) -> int:
    """A generous estimate of a case's result size: its inputs, exact, expected and tolerance
    terms, counted as float64 four times over."""
    return 32 * sum(prod(t.shape) for t in tensor_plan(case.params).values())


def _ordered_results(cases: list[Case], jobs: int):
    """build_case results in case order; ``jobs`` > 1 computes in spawned processes with a
    bounded window of cases in flight (by count and by size)."""
    if jobs <= 1:
        for case in cases:
            yield case, build_case(case)
        return
    ctx = multiprocessing.get_context("spawn")
    ship_to = transfer.shared_directory(WINDOW_BYTES + (WINDOW_BYTES >> 1))
    try:
        yield from _pooled_results(cases, jobs, ctx, ship_to)
    finally:
        transfer.remove_directory(ship_to)


def _pooled_results(cases: list[Case], jobs: int, ctx, ship_to: str | None):
    with ProcessPoolExecutor(max_workers=jobs, mp_context=ctx, initializer=_worker_init,
                             initargs=(ship_to, transfer.MIN_BYTES)) as pool:
        pending = deque()
        it = iter(cases)
        nxt = next(it, None)
        in_flight = 0

        def room() -> bool:
            if nxt is None or len(pending) >= WINDOW_CASES * jobs:
                return False
            return len(pending) < jobs or in_flight + _planned_bytes(nxt) <= WINDOW_BYTES

        try:
            while True:
                while room():
                    size = _planned_bytes(nxt)
                    pending.append((nxt, size, pool.submit(_build_and_ship, nxt)))
                    in_flight += size
                    nxt = next(it, None)
                if not pending:
                    break
                case, size, future = pending.popleft()
                try:
                    result = transfer.receive(future.result())
                except BrokenProcessPool:
                    raise GenerateError(f"case {case.id}: a worker process ended abruptly (killed, "
                                        "out of memory, or it could not start); --jobs 1 computes "
                                        "in this process and shows the cause") from None
                in_flight -= size
                yield case, result
        except BaseException:
            for _, _, future in pending:
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
