"""The middle layers stay as easy to read as the spec: no function in refspec/goldens,
refspec/ops or refspec/inputs longer than about 60 lines or with more than 8 parameters, no
module of theirs over 500 lines, every module name unique in the package, and
docs/architecture.md listing every module of the package (and no module that is gone)."""

from __future__ import annotations

import ast
import re
from collections import Counter
from pathlib import Path

import pytest

import refspec
from repo_paths import DOCS

PACKAGE = Path(refspec.__file__).parent
LAYERS = ("goldens", "ops", "inputs")
MAX_LINES, MAX_PARAMETERS, MAX_MODULE = 60, 8, 500


def modules(layer: str) -> list[Path]:
    return sorted((PACKAGE / layer).rglob("*.py"))


def functions(path: Path):
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            a = node.args
            n = len(a.posonlyargs) + len(a.args) + len(a.kwonlyargs)
            n -= int(bool(a.args) and a.args[0].arg in ("self", "cls"))
            yield node.name, node.lineno, node.end_lineno - node.lineno + 1, n


@pytest.mark.parametrize("layer", LAYERS)
def test_functions_are_short_and_take_few_parameters(layer):
    long = [f"{p.relative_to(PACKAGE)}:{line} {name} ({length} lines, {n} parameters)"
            for p in modules(layer) for name, line, length, n in functions(p)
            if length > MAX_LINES or n > MAX_PARAMETERS]
    assert not long, "\n".join(long)


@pytest.mark.parametrize("layer", LAYERS)
def test_modules_are_at_most_500_lines(layer):
    big = [f"{p.relative_to(PACKAGE)}: {n}" for p in modules(layer)
           if (n := p.read_text().count("\n")) > MAX_MODULE]
    assert not big, big


def test_every_module_name_is_unique_in_the_package():
    names = Counter(p.stem for p in PACKAGE.rglob("*.py") if not p.stem.startswith("__"))
    assert [n for n, k in names.items() if k > 1] == []


def test_the_architecture_page_lists_every_module():
    """docs/architecture.md has a table row for each module: ``| `refspec.spec.rope` | ...``."""
    text = (DOCS / "architecture.md").read_text()
    have = {"refspec." + ".".join(p.relative_to(PACKAGE).with_suffix("").parts)
            for p in PACKAGE.rglob("*.py") if not p.stem.startswith("__")}
    listed = set(re.findall(r"^\| `(refspec\.[a-z0-9_.]+)` \|", text, re.M))
    assert sorted(have - listed) == [], "modules the page does not list"
    assert sorted(listed - have) == [], "modules the page lists that do not exist"
