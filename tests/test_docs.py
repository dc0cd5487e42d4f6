"""The operator pages quote code lines verbatim: every quoted line must still be in the function
the page names, so the formula-next-to-code tables cannot drift from the code."""

import importlib
import inspect
import pathlib
import re

import pytest

DOCS = pathlib.Path(__file__).resolve().parents[1] / "docs"
IMPL = re.compile(r"`(refspec/[\w/]+)\.py:(\w+)`")


def _quoted_lines(page):
    """(page, line number, module, function, code) for every code cell of the page's tables."""
    rows, current = [], None
    for number, line in enumerate((DOCS / page).read_text().splitlines(), 1):
        if not line.startswith("|"):
            current = None
            continue
        cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
        named = [IMPL.search(c) for c in cells[:-1]]
        named = [m for m in named if m]
        if named:
            current = (named[-1].group(1).replace("/", "."), named[-1].group(2))
        if current is None or len(cells) < 2:
            continue
        for code in re.findall(r"`([^`]+)`", cells[-1]):
            if not IMPL.fullmatch(f"`{code}`"):
                rows.append((page, number, *current, code))
    return rows


ROWS = _quoted_lines("rope.md") + _quoted_lines("norm_rope_concat.md")


def test_pages_quote_code():
    assert len(ROWS) > 60


@pytest.mark.parametrize("page, number, module, function, code", ROWS,
                         ids=[f"{r[0]}:{r[1]}" for r in ROWS])
def test_quoted_line_is_in_the_named_function(page, number, module, function, code):
    source = inspect.getsource(getattr(importlib.import_module(module), function))
    squash = lambda s: " ".join(s.split())  # noqa: E731
    assert squash(code) in squash(source), f"{page}:{number}: `{code}` is not in {module}.{function}"
