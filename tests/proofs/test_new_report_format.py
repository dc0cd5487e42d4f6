"""Adding a report format takes one renderer and one entry, with no other change to the package
(docs/architecture.md, "Adding a report format"): a Markdown report defined in this file only,
written by ``write_report`` like the built-in formats, shows each output that did not pass with
the detail every report shows (its message, diagnosis and hint, in the one order)."""

from __future__ import annotations

import pytest

import refspec
from refspec.comparator.reports.detail import detail_lines
from refspec.comparator.reports.formats import FORMATS, ReportFormat, write_report
from refspec.comparator.sources.implementation import Implementation
from cli_helpers import invoke as run
from repo_paths import TESTS


def render_markdown(report) -> str:
    """A table of the outputs that did not pass, then each one's detail as a list."""
    bad = [r for r in report.ordered() if not r.passed]
    lines = [f"# {report.summary_line()}", "", "| case | output | status |", "|---|---|---|"]
    lines += [f"| `{r.case_id}` | {r.output} | {r.label} |" for r in bad]
    for r in bad:
        lines += ["", f"## {r.case_id} {r.output}", ""]
        lines += [f"- {text}" for text in detail_lines(r, ("message", "reason", "diagnosis",
                                                              "hint", "regenerate"))]
    return "\n".join(lines) + "\n"


@pytest.fixture
def markdown():
    FORMATS["markdown"] = ReportFormat("markdown", render_markdown)
    yield
    del FORMATS["markdown"]


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    """A kernel that flips dsin's sign in half mode (tests/impls/diagnosis_kernels.py), on the
    smoke sweep's RotaryPositionEmbeddingGrad cases."""
    path = tmp_path_factory.mktemp("format") / "smoke.h5"
    assert run("generate", "--sweep", "smoke", "--op", "rope_grad", "-o", path).exit_code == 0
    impl = Implementation(f"{TESTS / 'impls' / 'diagnosis_kernels.py'}:SIGN", repeat=0)
    return refspec.compare(path, impl)


def test_a_format_from_outside_is_written_like_the_built_in_ones(report, markdown, tmp_path):
    out = tmp_path / "report.md"
    write_report(report, "markdown", out)
    text = out.read_text()
    failing = [r for r in report.results if r.status == "fail"]
    assert failing and text.startswith(f"# {report.summary_line()}")
    for r in failing:
        assert f"| `{r.case_id}` | {r.output} | FAIL |" in text
        assert f"- {r.message}\n- {r.reason}\n- diagnosis: sign: the golden's negative" in text
    assert not list(tmp_path.glob("*.tmp*"))                 # written whole, under its name


def test_an_unknown_format_is_refused_with_the_known_ones(report, tmp_path):
    with pytest.raises(ValueError, match="unknown report format 'markdown'; the formats: json, "
                                         "junit, html"):
        write_report(report, "markdown", tmp_path / "x.md")
