"""The operator pages quote code lines verbatim: every quoted line must still be in the function
the page names, so the formula-next-to-code tables cannot drift from the code."""

import ast
import importlib
import inspect
import re

import pytest

from repo_paths import DOCS, REPO
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


ROWS = (_quoted_lines("rope.md") + _quoted_lines("norm_rope_concat.md")
        + _quoted_lines("apply_rotary_pos_emb.md") + _quoted_lines("rope_with_sin_cos_cache.md")
        + _quoted_lines("interleave_rope.md") + _quoted_lines("kv_rms_norm_rope_cache.md")
        + _quoted_lines("dequant_rope_quant_kvcache.md") + _quoted_lines("qkv_rms_norm_rope_cache.md"))


def test_pages_quote_code():
    assert len(ROWS) > 60


@pytest.mark.parametrize("page, number, module, function, code", ROWS,
                         ids=[f"{r[0]}:{r[1]}" for r in ROWS])
def test_quoted_line_is_in_the_named_function(page, number, module, function, code):
    source = inspect.getsource(getattr(importlib.import_module(module), function))
    squash = lambda s: " ".join(s.split())  # noqa: E731
    assert squash(code) in squash(source), f"{page}:{number}: `{code}` is not in {module}.{function}"


def test_errata_page_names_existing_tests():
    """docs/errata.md lists E1, E2, ... in order with none missing (E1-E12 at least), and every
    test it names exists (so the page cannot point at a test that was renamed or removed)."""
    page = DOCS / "errata.md"
    text = page.read_text(encoding="utf-8")
    numbers = [int(n) for n in re.findall(r"^\| E(\d+) \|", text, flags=re.M)]
    assert numbers == list(range(1, len(numbers) + 1)) and len(numbers) >= 12
    refs = re.findall(r"`(tests/[\w/]+\.py)::(\w+)`", text)
    assert len(refs) >= 12
    for path, name in refs:
        tree = ast.parse((REPO / path).read_text(encoding="utf-8"))
        names = {node.name for node in ast.walk(tree) if isinstance(node, ast.FunctionDef)}
        assert name in names, f"{path}::{name}"
