"""The pytest plugin (entry point ``pytest11``): one test item per golden case, judging an
implementation like ``refspec run`` (docs/run.md, "In pytest")::

    pytest --refspec-golden smoke.h5 --refspec-impl my_kernels [--refspec-framework torch]
           [--refspec-device npu] [--refspec-autograd] [--refspec-case PATTERN] [--refspec-op OP]
           [--refspec-soc SOC]

Each item is named by its case id and fails with the comparator's message naming the element
(``dx[b=1,n=3,s=17,d=5] = ... but should be ... (3.2 ulp) [...]``); a case the implementation
has no function for is skipped with the reason. Without ``--refspec-golden`` the plugin adds
nothing; it imports nothing heavy until it is asked for.
"""

from __future__ import annotations

import pytest

__all__ = ["pytest_addoption", "pytest_collection_modifyitems", "RefspecGoldenFile",
           "RefspecCase", "failure_text"]


def pytest_addoption(parser):
    group = parser.getgroup("refspec", "judging an implementation against refspec golden files")
    group.addoption("--refspec-golden", action="append", default=[], metavar="FILE",
                    help="Golden HDF5 file whose cases become test items (repeatable).")
    group.addoption("--refspec-impl", metavar="MODULE",
                    help="The implementation: a module name, a .py file, or MODULE:OBJECT.")
    group.addoption("--refspec-framework", choices=("numpy", "torch"), default="numpy",
                    help="How inputs are passed (default numpy).")
    group.addoption("--refspec-device", default=None, metavar="DEVICE",
                    help="torch device: cpu, cuda, npu, ... (default cpu).")
    group.addoption("--refspec-autograd", action="store_true",
                    help="Judge backward cases through the forwards and torch autograd.")
    group.addoption("--refspec-standard", default="default", metavar="NAME",
                    help="Accuracy standard (default, ascend-mixed, torch, vendor-threshold, ratio).")
    group.addoption("--refspec-case", action="append", default=[], metavar="PATTERN",
                    help="Only cases with this id or shell pattern (repeatable).")
    group.addoption("--refspec-op", action="append", default=[], metavar="OP",
                    help="Only the cases of this operator (repeatable).")
    group.addoption("--refspec-soc", action="append", default=[], metavar="SOC",
                    help="Only the cases of this chip profile: A2, A3, 950, none (repeatable).")
    group.addoption("--refspec-repeat", type=int, default=0, metavar="N",
                    help="Timed calls per case after the judged one (default 0).")


@pytest.hookimpl(tryfirst=True)          # before -k and -m select among the items
def pytest_collection_modifyitems(session, config, items):
    goldens = config.getoption("refspec_golden")
    if not goldens:
        return
    impl = config.getoption("refspec_impl")
    if not impl:
        raise pytest.UsageError("--refspec-golden needs --refspec-impl MODULE (the implementation "
                                "to judge)")
    from .comparator.sources.implementation import Implementation
    source = _Source(Implementation(impl, config.getoption("refspec_framework"),
                                    config.getoption("refspec_device"),
                                    config.getoption("refspec_autograd"),
                                    config.getoption("refspec_repeat")))
    for path in goldens:                  # relative to where pytest was started
        collector = RefspecGoldenFile.from_parent(session, path=config.invocation_params.dir / path,
                                                  source=source)
        items.extend(collector.collect())


class _Source:
    """The implementation, loaded on first use and shared by every item of the session."""

    def __init__(self, implementation):
        self.implementation = implementation
        self._opened = None

    def get(self):
        if self._opened is None:
            from .comparator.sources.frameworks import FrameworkError
            from .comparator.sources.implementation import ImplementationError
            try:
                self._opened = self.implementation.open()
            except (ImplementationError, FrameworkError) as exc:
                raise pytest.UsageError(str(exc)) from None
        return self._opened


class RefspecGoldenFile(pytest.File):
    """A golden file: one :class:`RefspecCase` per selected case."""

    def __init__(self, *, source, **kwargs):
        super().__init__(**kwargs)
        self.source = source

    def collect(self):
        from . import goldens
        from .goldens.selection import profiles, select_ids
        config = self.config
        try:
            gf = goldens.open(self.path)
        except goldens.GoldenFileError as exc:
            raise pytest.UsageError(f"--refspec-golden: {exc}") from None
        config.add_cleanup(gf.close)
        try:
            ids = select_ids(gf, config.getoption("refspec_case") or None,
                             config.getoption("refspec_op") or None,
                             profiles(config.getoption("refspec_soc")),
                             options=("--refspec-case", "--refspec-op", "--refspec-soc"))
        except Exception as exc:          # an unknown case, operator or profile
            raise pytest.UsageError(f"--refspec-case/--refspec-op/--refspec-soc: {exc}") from None
        for case_id in ids:
            yield RefspecCase.from_parent(self, name=case_id, golden=gf)


def failure_text(report) -> str:
    """The message of a case that did not pass: each failing row's message and, when the message
    does not already say it, the row's detail (a negative case's ``(status) = 0 but should be
    561002`` and why the input is invalid), as the terminal report words them; then the
    diagnosis, the hint and the command that regenerates the case."""
    from .comparator.reports.detail import detail_lines
    lines = []
    for r in report.failures:
        lines += detail_lines(r, ("message", "new_reason", "diagnosis", "hint"))
    regenerate = next((r.regenerate for r in report.failures if r.regenerate), "")
    if regenerate:
        lines.append(f"regenerate: {regenerate}")
    return "\n".join(lines)


class RefspecFailure(Exception):
    """A case that did not pass: the report's failing rows."""


class RefspecCase(pytest.Item):
    """One golden case judged like ``refspec run`` judges it."""

    def __init__(self, *, golden, **kwargs):
        super().__init__(**kwargs)
        self.golden = golden

    def runtest(self):
        from .comparator import compare
        source = self.parent.source.get()
        report = compare(self.golden[self.name], source,
                         standard=self.config.getoption("refspec_standard"), only_present=True,
                         socs=self.config.getoption("refspec_soc") or None)
        if report.not_run and not report.results:
            pytest.skip(report.not_run[0].reason)
        if report.notes and not report.results:      # a math-only status, not judged
            pytest.skip(report.notes[0])
        if not report.passed:
            raise RefspecFailure(report)

    def repr_failure(self, excinfo, style=None):
        if isinstance(excinfo.value, RefspecFailure):
            return failure_text(excinfo.value.args[0])
        return super().repr_failure(excinfo, style)

    def reportinfo(self):
        return self.path, None, f"refspec case {self.name}"
