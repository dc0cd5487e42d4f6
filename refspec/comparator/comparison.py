"""``refspec.compare(golden, actual, ...)``: the comparison of a kernel's outputs with golden
cases (docs/compare.md). Each selected case in turn: its status judged
(``judging.case_statuses``), each output looked up in the source (``sources``), its rule
resolved and its verdict found (``judging.judge``), a failing output diagnosed (``diagnosis``);
everything gathered in a ``reports.report.Report``. In one process, or in parts side by side.
"""

from __future__ import annotations

import logging
import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

from .. import goldens, ops
from ..goldens.format import GoldenFileError, UnknownCaseError
from ..goldens.selection import narrow, select_ids
from ..goldens.write import utc_now
from ..spec.errors import one_line
from .diagnosis.diagnose import diagnose_output
from .judging.benchmark import Attainable, BenchmarkUnavailable, float32_benchmark
from .judging.case_statuses import judge_status, math_only_note
from .judging.golden_output import check_golden_case, golden_output
from .judging.judge import JudgedOutput, judge
from .judging.naming import context_of
from .judging.options import CompareOptions
from .judging.outcomes import NotRun, OutputResult
from .judging.standards import resolve_rule
from .reports.report import Report
from .sources.ages import is_older, older_note, stale_before
from .sources.arrays import Problem
from .sources.base import ActualSource, CompareUsageError
from .sources.opening import open_source

__all__ = ["compare", "compare_with", "MAX_THREADS"]

_LOG = logging.getLogger("refspec")

#: threads that judge the blocks of one output side by side (at most the CPUs this process
#: may use)
MAX_THREADS = 4


def _cases(golden, selectors, operators=None, case_ids=None, socs=None,
           allow_incomplete=False):
    """(label, list of cases, closer) for a path, an open GoldenFile, or case objects."""
    if isinstance(golden, (str, os.PathLike, goldens.GoldenFile)):
        own = not isinstance(golden, goldens.GoldenFile)
        gf = goldens.open(golden, allow_incomplete) if own else golden
        try:
            if case_ids is not None:
                missing = [i for i in case_ids if i not in gf]
                if missing:
                    raise UnknownCaseError(f"case {missing[0]!r} is not in {gf.path}")
                ids = list(case_ids)
            else:
                ids = select_ids(gf, selectors, operators, socs)
        except BaseException:
            if own:
                gf.close()
            raise
        return (os.fspath(golden) if own else gf.path, (gf[i] for i in ids), len(ids),
                gf.close if own else (lambda: None), _stamp(gf))
    cases = list(golden) if isinstance(golden, (list, tuple)) else [golden]
    if selectors:
        import fnmatch
        cases = [c for c in cases if any(fnmatch.fnmatchcase(c.case_id, s) for s in selectors)]
    by_id = {c.case_id: c for c in cases}
    kept = set(narrow([c.case_id for c in cases], selectors, lambda i: by_id[i].op,
                      lambda i: by_id[i].params.get("soc"), operators, socs,
                      "compare() was given", ("case", "operator", "soc")))
    cases = [c for c in cases if c.case_id in kept]
    label = cases[0].case_id if len(cases) == 1 else f"{len(cases)} cases"
    return label, iter(cases), len(cases), lambda: None, {}


def _stamp(gf) -> dict:
    """The ``Report`` fields that say which golden file was judged against
    (``Report.provenance``)."""
    return {"golden_digest": gf.digest, "golden_created": gf.created,
            "golden_complete": gf.complete, "stale_before": stale_before(gf.attrs)}


def compare(golden, actual, *, cases=None, standard: str = "default", rtol: float | None = None,
            atol: float | None = None, saturation: bool = False, mapping=None, top: int = 10,
            ratio_level: str | None = None, heatmaps: bool = False,
            heatmap_axes: str | None = None, progress=None, fast: bool | None = None, status=None,
            only_present: bool = False, operators=None, case_ids=None, jobs: int = 1,
            scheduler: str | None = None, socs=None, diagnose: bool = True,
            allow_incomplete: bool = False) -> Report:
    """Judge a kernel's outputs against golden cases.

    ``golden``: a golden HDF5 path, an open ``refspec.goldens.GoldenFile``, or case objects
    (``GoldenCase``/``MemoryCase``). ``actual``: a directory (``refspec export`` layout or any
    ``<case_id>/<output>.bin|.npy`` tree), a ``.npz``/``.npy`` file, an HDF5 file, an msprobe dump
    directory (with ``mapping``), or a dict of arrays (``{case_id: {output: array}}``, or
    ``{output: array}`` for one case). ``cases``: ids or shell patterns. ``standard``: one of
    ``STANDARD_NAMES``; ``rtol``/``atol`` override its numbers for this run.
    ``saturation``: accept max-finite where the golden is an infinity (both clipped).
    ``fast``: None (the default) judges outputs of more than 2^16 elements by the compiled
    pass and the others by the NumPy pass (the same report, and nothing to compile for a small
    comparison); True the compiled pass for every output, False the NumPy pass for every one
    (slower; for checking and benchmarks). ``status``: the status the kernel
    returned (0: accepted; else its aclnn code), an int for one case or ``{case_id: code}``;
    it takes the place of the ``status.json`` files of a directory. ``only_present``: cases
    with no output and no status were left out on purpose (they do not fail the run).
    ``operators``: only the cases of these operators (short ids, function or aclnn names);
    ``case_ids``: exactly these cases (no patterns). ``socs``: only the cases of these chip
    profiles (``"A2"``, ``"950"``, ``"none"`` or None for the math-only one); the math-only
    profile's statuses are judged only when it is among them
    (``judging.case_statuses.judge_status``). ``jobs`` worker processes, or the Dask cluster at
    ``scheduler``, judge groups of cases side by side
    (the golden file and the actual outputs given as paths, or an actual source description
    such as ``refspec run``'s ``Implementation``); the report is the one a single process
    gives. ``diagnose``: each failing output gets its diagnosis (``OutputResult.diagnosis``,
    docs/compare.md "Diagnosis"); False leaves it out.
    ``allow_incomplete``: judge against a golden file not marked complete (an interrupted
    run), the cases it holds; without it such a file is refused
    (``refspec.goldens.IncompleteGoldenError``).
    Input problems become per-output statuses; ``CompareUsageError`` and
    ``refspec.goldens.GoldenFileError`` are raised for unusable arguments. A damaged golden
    file (a dataset whose checksum fails, that is missing, stored outside the file, not what
    the index describes, an expected output that is not its exact value rounded once) is
    ``refspec.goldens.CorruptGoldenError`` naming the file, the case and the dataset, never
    a verdict on the kernel's outputs: every dataset of a case is checked before the case is
    judged, and the expected outputs against the exact ones as they are read.
    """
    options = CompareOptions(standard=standard, rtol=rtol, atol=atol, saturation=saturation,
                             top=top, ratio_level=ratio_level, heatmap_axes=heatmap_axes,
                             heatmaps=heatmaps, fast=fast, cases=cases, mapping=mapping,
                             status=status, only_present=only_present, operators=operators,
                             case_ids=case_ids, jobs=jobs, scheduler=scheduler, socs=socs,
                             diagnose=diagnose, allow_incomplete=allow_incomplete)
    return compare_with(golden, actual, options, progress)


def compare_with(golden, actual, options: CompareOptions, progress=None) -> Report:
    """``compare`` with its options as one ``CompareOptions`` (as ``refspec compare`` and
    ``refspec run`` build them); ``progress(done, total, case_id)`` after each case."""
    options = options.checked()
    t0 = time.perf_counter()
    if options.jobs > 1 or options.scheduler:
        return _compare_in_parts(golden, actual, options, progress, t0)
    return _finished(_compare_here(golden, actual, options, progress), t0)


def _compare_here(golden, actual, options: CompareOptions, progress=None) -> Report:
    """The comparison in this process, before ``_finished``."""
    source = open_source(actual, options.mapping)
    try:
        label, case_iter, n_cases, close, stamp = _cases(golden, options.cases,
                                                         options.operators, options.case_ids,
                                                         options.socs, options.allow_incomplete)
    except BaseException:
        source.close()
        raise
    try:
        statuses = _statuses(options.status, n_cases)
        _check_arrays_of_one_case(actual, n_cases)
    except BaseException:
        close()
        raise
    report = Report(golden=label, actual=getattr(source, "path", str(actual)),
                    standard=options.standard, overrides=options.overrides,
                    saturation=options.saturation, only_present=options.only_present, **stamp)
    try:
        _judge_cases(case_iter, n_cases, source, statuses, options, report, progress)
        report.notes += [n for n in source.notes() if n not in report.notes]
    finally:
        close()
        source.close()
    report.timings = dict(source.timings)
    return report


def _finished(report: Report, t0: float) -> Report:
    """The report with its time, and the note on actual files older than the golden file."""
    if report.older_files:
        report.older_files.sort()                       # the same order from parts
        note = older_note(report.older_files, report.golden, report.golden_created)
        report.notes.append(note)
        _LOG.warning(note)
    report.elapsed = time.perf_counter() - t0
    report.judged_at = utc_now()
    return report


def _check_arrays_of_one_case(actual, n_cases) -> None:
    """A dict of arrays ``{output: array}`` is one case's outputs: more cases are ambiguous."""
    if isinstance(actual, dict) and n_cases > 1 and actual and not any(
            isinstance(v, dict) for v in actual.values()):
        raise CompareUsageError(
            f"the arrays ({', '.join(map(str, actual))}) are the outputs of one case, and "
            f"{n_cases} cases are selected: say which with case=ID (cases= in compare), or "
            "give {case_id: {output: array}}")


def _judge_cases(case_iter, n_cases, source, statuses, options, report, progress) -> None:
    """Each case in turn: its status, then its outputs (blocks side by side in a thread pool
    of at most ``MAX_THREADS``, for the compiled pass)."""
    threads = min(len(os.sched_getaffinity(0)), MAX_THREADS) if options.fast is not False else 1
    pool = ThreadPoolExecutor(threads, thread_name_prefix="refspec-compare") if threads > 1 \
        else None
    opts = replace(options, pool=pool)
    unjudged = None if options.socs is not None and None in options.socs else []  # math-only
    try:
        for i, case in enumerate(case_iter):
            source.single_case = case.case_id if n_cases == 1 else None
            check_golden_case(case)
            case = source.reference(case)
            if statuses is None:
                code, why = source.status(case.case_id)
                _older(report, [source.status_file(case.case_id)])
            else:
                code, why = statuses.get(case.case_id, statuses.get(None)), None
            if not judge_status(case, code, why, report, source, unjudged):
                _judge_case(case, source, opts, report, code is not None or why is not None)
            if progress is not None:
                progress(i + 1, n_cases, case.case_id)
    finally:
        if pool is not None:
            pool.shutdown()
    if unjudged:
        report.notes.append(math_only_note(unjudged))


def _compare_part(task) -> Report:
    """One group of cases judged in a worker process (or on a Dask worker)."""
    golden, actual, ids, options = task
    return _compare_here(golden, actual, replace(options.checked(), case_ids=ids, cases=None,
                                                 operators=None, jobs=1, scheduler=None))


def _compare_in_parts(golden, actual, options, progress, t0) -> Report:
    """compare() with groups of cases of about equal size judged side by side; the parts'
    reports are joined in the order of the selection."""
    from ..goldens import executors
    if not isinstance(golden, (str, os.PathLike)) or isinstance(actual, dict) or (
            isinstance(actual, ActualSource)):
        raise CompareUsageError("judging in parallel (--jobs, --scheduler) needs the golden file "
                                "as a path and the actual outputs as a path (or refspec run's "
                                "implementation), which each worker opens itself")
    golden = os.fspath(golden)
    actual = os.fspath(actual) if isinstance(actual, os.PathLike) else actual
    open_source(actual, options.mapping).close()        # usage errors before any work
    with goldens.open(golden, options.allow_incomplete) as gf:
        ids = select_ids(gf, options.cases, options.operators, options.socs)
        stamp = _stamp(gf)
        size = {r.case_id: r.data_bytes for r in gf.summary()}
    jobs, scheduler = options.jobs, options.scheduler
    workers = executors.worker_count(scheduler) if scheduler else jobs
    groups = executors.balance([size.get(i, 0) + CASE_BYTES for i in ids], 4 * workers)
    tasks = [(golden, actual, [ids[i] for i in g], options) for g in groups]
    parts, done = [], 0
    for i, part in executors.run(_compare_part, tasks, jobs=jobs, scheduler=scheduler):
        parts.append(part)
        done += len(tasks[i][2])
        if progress is not None:
            progress(done, len(ids), tasks[i][2][-1])
    report = _joined(parts, ids, golden)
    report = replace(report, **stamp)
    return _finished(report, t0)


#: the work of judging a case beyond its bytes, in bytes (for splitting a run into parts)
CASE_BYTES = 1 << 18


def _joined(parts: list[Report], ids: list[str], golden: str) -> Report:
    """The reports of groups of cases as one, in the order of ``ids``."""
    order = {case_id: k for k, case_id in enumerate(ids)}
    first = parts[0] if parts else None
    report = Report(golden=golden, actual=first.actual if first else "",
                    standard=first.standard if first else "default",
                    overrides=dict(first.overrides) if first else {},
                    saturation=first.saturation if first else False,
                    only_present=first.only_present if first else False)
    for part in parts:
        report.results += part.results
        report.not_run += part.not_run
        report.timings.update(part.timings)
        report.older_files += part.older_files
        report.notes += [n for n in part.notes if n not in report.notes]
    report.results.sort(key=lambda r: order[r.case_id])       # stable: outputs keep their order
    report.not_run.sort(key=lambda n: order[n.case_id])
    report.timings = {i: report.timings[i] for i in ids if i in report.timings}
    return report


def _statuses(status, n_cases):
    """``status`` as {case_id: code} ({None: code} for one case), or None when not given."""
    if status is None:
        return None
    if isinstance(status, dict):
        bad = [k for k, v in status.items() if not isinstance(v, int) or isinstance(v, bool)]
        if bad:
            raise CompareUsageError(f"status of case {bad[0]!r}: give an integer code (0 when "
                                    "the kernel accepted the input)")
        return dict(status)
    if isinstance(status, int) and not isinstance(status, bool):
        if n_cases != 1:
            raise CompareUsageError(f"status={status}: one code for {n_cases} cases; give "
                                    "{case_id: code}")
        return {None: status}
    raise CompareUsageError(f"status: give an integer code or {{case_id: code}}, not "
                            f"{type(status).__name__}")

def _judge_case(case, source, opts: CompareOptions, report: Report, has_status: bool) -> None:
    """Each output of a case that ran: looked up, its rule resolved, judged (``judge``: a
    failing one diagnosed, and checked against what a kernel's own arithmetic can attain, asked
    once for the case)."""
    context = context_of(case.op, case.params)
    goldens_, lookups = _lookups(case, source)
    _older(report, [getattr(a, "path", None) for a in lookups.values()])
    if lookups and not has_status and all(_unwritten(source, case.op, n, v)
                                          for n, v in lookups.items()):
        report.not_run.append(NotRun(case.case_id, case.op, source.not_run_reason(case.case_id)
                                     or "no output and no status"))
        return
    bench, bench_error = _ratio_benchmark(case, opts)
    attainable = Attainable(case)
    for name in case.output_names:
        try:
            golden = goldens_.get(name) or golden_output(case, name)
            rule = resolve_rule(opts.standard, golden.dtype_name, golden.judged_class,
                                golden.K, rtol=opts.rtol, atol=opts.atol, op=case.op,
                                ratio_level=opts.ratio_level)
        except GoldenFileError:
            raise
        except Exception as exc:
            report.results.append(OutputResult(case.case_id, case.op, name, context,
                                               regenerate=case.regenerate)
                                  .problem("error", f"golden metadata: {exc}"))
            continue
        if bench_error is not None:
            report.results.append(OutputResult(case.case_id, case.op, name, context,
                                               regenerate=case.regenerate,
                                               comparison_class=golden.comparison_class,
                                               dtype=golden.dtype_name, shape=golden.shape,
                                               axes=golden.axes, rule=rule.describe())
                                  .problem("error", bench_error))
            continue
        res = judge(JudgedOutput(case, golden, lookups[name], rule, opts,
                                 None if bench is None else bench.get(name),
                                 diagnose=diagnose_output if opts.diagnose else None,
                                 attainable=attainable), context)
        report.results.append(res)


def _older(report: Report, paths) -> None:
    """The actual files among ``paths`` (None: no file) last written before the golden file
    was made, in ``report.older_files`` (``sources.ages``)."""
    since = report.stale_before
    if since is None:
        return
    for path in paths:
        if path and is_older(path, since) and path not in report.older_files:
            report.older_files.append(path)


def _unwritten(source, op: str, name: str, actual) -> bool:
    """Whether an output shows nothing of a kernel run: missing, or, in an export directory, a
    cache updated in place (its file is there from the export, run or not)."""
    if isinstance(actual, Problem):
        return actual.status == "missing"
    record = ops.find(op)
    return source.kind == "directory" and record is not None and name in record.in_place


def _lookups(case, source) -> tuple[dict, dict]:
    """The golden outputs of a case and the actual of each (an ActualArray or a Problem)."""
    goldens_, lookups = {}, {}
    for name in case.output_names:
        try:
            golden = goldens_[name] = golden_output(case, name)
            lookups[name] = source.lookup(case.case_id, case.op, name, golden.dtype,
                                          golden.shape)
        except GoldenFileError:
            raise
        except Exception as exc:  # a reader bug must not end the run
            lookups[name] = Problem("unreadable", f"{one_line(exc)}")
    return goldens_, lookups


def _ratio_benchmark(case, opts: CompareOptions) -> tuple[dict | None, str | None]:
    """The ratio standard's float32 benchmark of a case, or why there is none."""
    if opts.standard != "ratio":
        return None, None
    try:
        return float32_benchmark(case), None
    except BenchmarkUnavailable as exc:
        return None, str(exc)
    except GoldenFileError:
        raise
    except Exception as exc:  # inputs the spec rejects, and the like
        return None, f"benchmark failed: {one_line(exc)}"
