"""Where independent tasks run: this process, worker processes of the standard library's pool,
or a Dask distributed cluster (docs/cluster.md).

A task is a module-level function and one picklable argument; its result should be small (the
generator's tasks write their own files and return a summary, the comparator's return verdicts),
so nothing large travels between processes. ``run`` yields each task's index and result as
it completes.

Worker processes ignore SIGINT: a Ctrl-C in a terminal reaches the whole process group, and only
the parent should answer it. ``run`` then tells the tasks under way to stop (the
generator's tasks stop at their next case boundary, see ``refspec.goldens.engine``), cancels
those not started, and lets the KeyboardInterrupt through once the others have returned.

A worker outlives a parent that is killed (SIGKILL reaches the parent alone), and an idle one
would wait for tasks forever. So a task that works through many pieces asks ``parent_gone()``
between them and returns when it is true, and each worker process watches its parent
(``multiprocessing.parent_process().sentinel``, closed by the system when the parent dies,
however it dies): once the parent is gone and no task is under way, the worker ends. No worker
goes on writing, or waiting, for a run that has ended.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.connection
import os
import signal
import threading
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool

from ..spec.errors import one_line

__all__ = ["SCHEDULER_ENV", "WorkerLost", "SchedulerUnavailable", "run", "scheduler_address",
           "worker_count", "balance", "parent_gone"]

#: environment variable naming a Dask scheduler when ``--scheduler`` is not given
SCHEDULER_ENV = "REFSPEC_SCHEDULER"


class WorkerLost(RuntimeError):
    """A worker process ended without returning (killed, out of memory, could not start)."""


class SchedulerUnavailable(RuntimeError):
    """No Dask: the distributed package is missing, or the scheduler cannot be reached."""


def parent_gone() -> bool:
    """True in a worker process whose parent (the process that started it) has ended; False in
    the main process. The standard library's ``multiprocessing.parent_process()`` watches the
    parent's end of a pipe, which the system closes when the parent dies, however it dies."""
    parent = multiprocessing.parent_process()
    return parent is not None and not parent.is_alive()


#: held by a worker process while it runs a task (``_run_task``), taken for good by the thread
#: that ends the worker when its parent is gone (``_end_with_parent``)
_TASK = threading.Lock()


def _watch_parent() -> None:
    """Initializer of each worker process: a thread that ends it once its parent is gone."""
    parent = multiprocessing.parent_process()
    if parent is not None:
        threading.Thread(target=_end_with_parent, args=(parent.sentinel,), daemon=True,
                         name="refspec-parent-watch").start()


def _end_with_parent(sentinel) -> None:
    multiprocessing.connection.wait([sentinel])         # returns when the parent has ended
    _TASK.acquire()               # the task under way returns at its next piece (parent_gone)
    os._exit(0)


def _run_task(fn, task):
    with _TASK:
        return fn(task)


def scheduler_address(given: str | None) -> str | None:
    """``given``, else ``$REFSPEC_SCHEDULER``, else None (run locally)."""
    return given or os.environ.get(SCHEDULER_ENV) or None


def balance(weights: list, parts: int) -> list[list[int]]:
    """The indices of ``weights`` in ``parts`` groups of about equal total weight (the heaviest
    first, each to the lightest group; deterministic), each group in index order."""
    parts = max(1, min(parts, len(weights)))
    load = [0] * parts
    group = [0] * len(weights)
    for i in sorted(range(len(weights)), key=lambda i: (-weights[i], i)):
        k = min(range(parts), key=lambda k: (load[k], k))
        group[i] = k
        load[k] += weights[i]
    return [[i for i in range(len(weights)) if group[i] == k] for k in range(parts)]


def _client(address: str):
    try:
        from distributed import Client
    except ImportError:
        raise SchedulerUnavailable("a Dask scheduler needs the distributed package: "
                                   "pip install \"refspec[dask]\"") from None
    try:
        return Client(address, timeout=30)
    except Exception as exc:              # OSError, TimeoutError, a malformed address, ...
        detail = one_line(exc)
        raise SchedulerUnavailable(f"cannot reach the Dask scheduler at {address!r}: {detail}") from None


def worker_count(scheduler: str) -> int:
    """How many Dask workers the scheduler has now (at least 1)."""
    with _client(scheduler) as client:
        return max(1, len(client.scheduler_info().get("workers", {})))


def run(fn, tasks: list, *, jobs: int = 1, scheduler: str | None = None, on_interrupt=None):
    """Run ``fn(task)`` for every task; yield ``(index, result)`` in completion order.

    ``jobs`` worker processes (1: in this process, in order) or the Dask cluster at
    ``scheduler``. If anything ends the run early (KeyboardInterrupt, a lost worker, the caller
    closing the generator), ``on_interrupt()`` is called first (it should make the tasks under
    way stop soon), the tasks not started are cancelled, and the exception goes on once the
    tasks under way have returned. A worker that dies raises ``WorkerLost``.
    """
    if scheduler:
        yield from _run_dask(fn, tasks, scheduler, on_interrupt)
    elif jobs <= 1:
        for i, task in enumerate(tasks):
            yield i, fn(task)
    else:
        yield from _run_processes(fn, tasks, jobs, on_interrupt)


def _run_processes(fn, tasks, jobs, on_interrupt):
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=min(jobs, len(tasks)) or 1, mp_context=ctx,
                             initializer=_watch_parent) as pool:
        try:
            # the workers start while SIGINT is ignored and inherit that (Python keeps a SIGINT
            # disposition its parent changed), so a Ctrl-C reaches this process alone
            previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
            try:
                futures = {pool.submit(_run_task, fn, task): i for i, task in enumerate(tasks)}
            finally:
                signal.signal(signal.SIGINT, previous)
            for future in as_completed(futures):
                try:
                    result = future.result()
                except BrokenProcessPool:
                    raise WorkerLost("a worker process ended abruptly (killed, out of memory, "
                                     "or it could not start)") from None
                yield futures[future], result
        except BaseException:
            if on_interrupt is not None:
                on_interrupt()
            pool.shutdown(wait=True, cancel_futures=True)
            raise


def _run_dask(fn, tasks, address, on_interrupt):
    with _client(address) as client:
        from distributed import as_completed as dask_completed
        futures = [client.submit(fn, task, pure=False) for task in tasks]
        index = {f.key: i for i, f in enumerate(futures)}
        try:
            for future in dask_completed(futures):
                yield index[future.key], future.result()
        except BaseException:
            if on_interrupt is not None:
                on_interrupt()
            client.cancel([f for f in futures if not f.done()])
            raise
