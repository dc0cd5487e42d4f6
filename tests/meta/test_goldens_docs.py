"""The runnable example of docs/goldens.md runs and prints what its comments say."""

import contextlib
import io
import re

import pytest

from repo_paths import DOCS

DOC = str(DOCS / "goldens.md")


def runnable_blocks():
    text = open(DOC, encoding="utf-8").read()
    return [b for b in re.findall(r"```python\n(.*?)```", text, re.S) if "..." not in b]


def test_doc_has_a_runnable_reader_example():
    assert any("goldens.open(" in b for b in runnable_blocks())


@pytest.mark.parametrize("block", runnable_blocks())
def test_doc_example_runs(block, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(block, DOC, "exec"), {})
    printed = out.getvalue()
    assert "['dy', 'cos', 'sin', 'x'] ['dx', 'dcos', 'dsin']" in printed
    assert "(2, 8, 128, 64) bfloat16 262144 None" in printed
    assert "'comparison_class': 'reduction', 'reduced_terms': 16" in printed
