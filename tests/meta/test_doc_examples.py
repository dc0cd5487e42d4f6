"""Every Python example of the docs and the README that is meant to run runs as written.

A ```python block is shown, not run, when it is a signature (it does not compile), has `...`
placeholders in its code, or the line before it is an HTML comment saying why it is not run (a Slurm
cluster, a module another test runs). Every other block runs in a folder where `refspec
generate -o smoke.h5` ran and an implementation `my_kernels.py` exists (the torch forwards of
tests/impls/), as the pages say."""

from __future__ import annotations

import ast
import contextlib
import io
import re
import shutil

import pytest
from click.testing import CliRunner

from refspec.cli import main
from repo_paths import DOCS, README, TESTS

BLOCK = re.compile(r"(?:^(<!--[^\n]*-->)\n)?```python\n(.*?)```", re.S | re.M)


def _placeholders(tree) -> bool:
    """Whether code stands for values with ``...`` (an argument, a keyword's value, a
    statement), as opposed to indexing with it (``dy[..., :63]``)."""
    def dots(node):
        return isinstance(node, ast.Constant) and node.value is Ellipsis
    for n in ast.walk(tree):
        if isinstance(n, ast.Call) and any(dots(a) for a in n.args):
            return True
        if isinstance(n, ast.keyword) and dots(n.value) or isinstance(n, ast.Expr) and dots(n.value):
            return True
    return False


def _blocks():
    """(page, number, code, why it is not run or "")."""
    out = []
    for page in sorted(DOCS.glob("*.md")) + [README]:
        for k, (comment, code) in enumerate(BLOCK.findall(page.read_text(encoding="utf-8"))):
            try:
                why = "a placeholder" if _placeholders(ast.parse(code)) else ""
            except SyntaxError:
                why = "a signature"
            if comment.startswith("<!-- not run"):
                why = comment
            out.append((page, k, code, why))
    return out


BLOCKS = _blocks()
RUN = [b for b in BLOCKS if not b[3]]


def test_the_examples_meant_to_run_are_found():
    pages = {b[0].name for b in RUN}
    assert {"compare.md", "api.md", "goldens.md", "run.md", "README.md"} <= pages, pages
    assert all(b[3] for b in BLOCKS if b[0].name == "cluster.md")


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    d = tmp_path_factory.mktemp("docs")
    result = CliRunner().invoke(main, ["generate", "-o", str(d / "smoke.h5")])
    assert result.exit_code == 0, result.output
    shutil.copy(TESTS / "impls" / "torch_forward.py", d / "my_kernels.py")
    return d


@pytest.mark.parametrize("page, number, code, why", RUN, ids=[f"{b[0].name}:{b[1]}" for b in RUN])
def test_doc_example_runs(page, number, code, why, folder, monkeypatch):
    if "framework=\"torch\"" in code:
        pytest.importorskip("torch")
    monkeypatch.chdir(folder)
    monkeypatch.syspath_prepend(str(folder))
    with contextlib.redirect_stdout(io.StringIO()):
        exec(compile(code, f"{page.name} block {number}", "exec"), {"__name__": "__doc_example__"})
