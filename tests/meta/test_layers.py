"""The package's shape (docs/architecture.md): layers in folders, imports only downward, the
comparator's four rooms importing only from the rooms before them, no import cycle (every import
followed, those inside functions included), every module reachable by its dotted name, no
operator branches outside the records, and none of the process or memory machinery the project
does not use."""

from __future__ import annotations

import ast
import importlib
import pkgutil
import subprocess
import sys
import types
from pathlib import Path

import pytest

import refspec

PACKAGE = Path(refspec.__file__).parent
#: each layer and the layers it may import (its own included)
LAYERS = {"spec": {"spec"}, "ops": {"spec", "ops"}, "goldens": {"spec", "ops", "goldens"},
          "inputs": {"spec", "ops", "goldens", "inputs"},
          "comparator": {"spec", "ops", "goldens", "inputs", "comparator"},
          "cli": {"spec", "ops", "goldens", "inputs", "comparator", "cli"}}
#: the comparator's rooms in order: a module imports from its own room and the rooms before it;
#: the modules at the comparator's top (``refspec.comparator``, ``comparison``) from all four
ROOMS = ("sources", "judging", "diagnosis", "reports")
#: modules at the package's top: what they may import
TOP = {"refspec": {"spec"}, "refspec._version": set(), "refspec.__main__": {"cli"},
       "refspec.testing": {"spec", "ops", "goldens", "inputs", "comparator"},
       "refspec.pytest_plugin": {"spec", "ops", "goldens", "inputs", "comparator"}}


def modules() -> list[str]:
    names = ["refspec"]
    for info in pkgutil.walk_packages([str(PACKAGE)], prefix="refspec."):
        names.append(info.name)
    return sorted(names)


MODULES = modules()


def source(name: str) -> Path:
    path = PACKAGE.joinpath(*name.split(".")[1:])
    return path / "__init__.py" if path.is_dir() else path.with_suffix(".py")


def imported(name: str, top_level_only: bool = False, text: str | None = None) -> set[str]:
    """The refspec modules ``name`` imports (absolute names; relative imports resolved), those
    inside functions and classes too unless ``top_level_only``; ``text``: the module's source
    (default: its file)."""
    tree = ast.parse(source(name).read_text() if text is None else text)
    package = name if text is None and source(name).name == "__init__.py" \
        else name.rpartition(".")[0]
    found = set()
    nodes = tree.body if top_level_only else ast.walk(tree)
    type_only = {id(n) for block in ast.walk(tree) if _type_checking(block)
                 for stmt in block.body for n in ast.walk(stmt)}
    for node in nodes:
        if id(node) in type_only:        # read by type checkers, never run
            continue
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("refspec")}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            if not mod.startswith("refspec"):
                continue
            submodules = {f"{mod}.{a.name}" for a in node.names if f"{mod}.{a.name}" in MODULES}
            found |= submodules                      # "from . import blocks" imports blocks
            if not submodules or node.module:
                found.add(mod)
    return found


def _type_checking(node) -> bool:
    """``if TYPE_CHECKING:`` (or ``typing.TYPE_CHECKING``)."""
    test = getattr(node, "test", None) if isinstance(node, ast.If) else None
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING"
            or isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def layer(name: str) -> str | None:
    parts = name.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in LAYERS else None


def test_every_layer_is_a_folder_and_every_module_in_one():
    for lay in LAYERS:
        assert (PACKAGE / lay / "__init__.py").exists()
    loose = [m for m in MODULES if layer(m) is None and m not in TOP]
    assert not loose, f"modules outside the layer folders: {loose}"


@pytest.mark.parametrize("name", MODULES)
def test_imports_point_down(name):
    """(The package itself loads the layers above the spec on first use, inside functions.)"""
    allowed = TOP[name] if name in TOP else LAYERS[layer(name)]
    for target in imported(name, top_level_only=name == "refspec"):
        lay = layer(target) or ("top" if target in TOP else None)
        if target in ("refspec._version", "refspec"):
            continue
        assert lay in allowed, f"{name} imports {target} (layer {lay}; allowed {sorted(allowed)})"


def room(name: str) -> int | None:
    """The rank of a comparator module's room (``ROOMS``; the comparator's top ranks after
    them), None outside the comparator."""
    parts = name.split(".")
    if parts[:2] != ["refspec", "comparator"]:
        return None
    return ROOMS.index(parts[2]) if len(parts) > 2 and parts[2] in ROOMS else len(ROOMS)


def upward(name: str, targets) -> list[str]:
    """The comparator modules among ``targets`` in a room after ``name``'s."""
    return sorted(t for t in targets if room(t) is not None and room(t) > room(name))


@pytest.mark.parametrize("name", [m for m in MODULES if room(m) is not None])
def test_comparator_rooms_import_only_from_the_rooms_before_them(name):
    """sources, then judging, then diagnosis, then reports: no module imports from a later
    room, not even inside a function."""
    assert upward(name, imported(name)) == [], f"{name} imports from a later room"


def cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """An import cycle of ``graph`` (module -> the modules it imports), or None."""
    state: dict[str, int] = {}

    def visit(m, path):
        state[m] = 1
        for t in sorted(graph[m]):
            if state.get(t) == 1:
                return path[path.index(t):] + [t]
            if t not in state:
                found = visit(t, path + [t])
                if found:
                    return found
        state[m] = 2
        return None

    for m in sorted(graph):
        if m not in state:
            found = visit(m, [m])
            if found:
                return found
    return None


def test_no_import_cycles():
    """Every import of every module followed, those inside functions included. The package
    itself (``refspec``) loads the layers above the spec inside a function, on first use, so
    its own imports are its top-level ones: the spec's."""
    graph = {m: {t for t in imported(m, top_level_only=m == "refspec") if t in MODULES and t != m}
             for m in MODULES}
    found = cycle(graph)
    assert found is None, "import cycle: " + " -> ".join(found)


def test_the_import_checks_see_what_they_look_for():
    """An import inside a function is found, resolved from a subpackage of the comparator; a
    later room is upward; a cycle through it is found."""
    text = "def f():\n    from ..reports.report import Report\n    from . import measure\n"
    found = imported("refspec.comparator.judging.verdict", text=text)
    assert found == {"refspec.comparator.reports.report", "refspec.comparator.judging.measure"}
    assert upward("refspec.comparator.judging.verdict", found) == [
        "refspec.comparator.reports.report"]
    assert upward("refspec.comparator.reports.report", {"refspec.comparator.sources.base"}) == []
    type_only = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from . import measure\n"
    assert imported("refspec.comparator.judging.verdict", text=type_only) == set()
    assert cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert cycle({"a": {"b"}, "b": set()}) is None


@pytest.mark.parametrize("name", MODULES)
def test_every_module_imports_by_its_dotted_name(name):
    module = importlib.import_module(name)
    assert isinstance(module, types.ModuleType)
    parent, _, leaf = name.rpartition(".")
    if parent:
        attr = getattr(importlib.import_module(parent), leaf)
        assert attr is module, f"{parent}.{leaf} is {attr!r}, not the module: a name shadows it"


def test_import_refspec_loads_the_spec_alone():
    code = ("import sys, refspec; print(sorted(m for m in sys.modules if m.split('.')[0] in "
            "('h5py', 'click', 'matplotlib', 'torch') or m.startswith(('refspec.ops', "
            "'refspec.goldens', 'refspec.inputs', 'refspec.comparator', 'refspec.cli'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout
    code = "import refspec; print(refspec.compare.__module__, refspec.goldens.__name__)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["refspec.comparator.comparison", "refspec.goldens"]


FORBIDDEN = ("os.fork", "import ctypes", "/dev/shm", "h5py._hl", "process_vm_readv",
             "sync_file_range", "multiprocessing.shared_memory", "mmap.mmap(")


@pytest.mark.parametrize("name", MODULES)
def test_no_home_made_process_or_memory_machinery(name):
    text = source(name).read_text()
    found = [f for f in FORBIDDEN if f in text]
    assert not found, f"{name} uses {found}"


def _operator_names() -> set[str]:
    return {n for op in refspec.ops.OPERATORS.values() for n in op.names}


@pytest.mark.parametrize("name", [m for m in MODULES if layer(m) != "ops"])
def test_no_branches_on_operator_names_outside_the_records(name):
    names = _operator_names()
    tree = ast.parse(source(name).read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            for side in [node.left, *node.comparators]:
                values = [side] + list(getattr(side, "elts", []))
                hits = [v.value for v in values if isinstance(v, ast.Constant) and v.value in names]
                assert not hits, f"{name}:{node.lineno} compares with operator name {hits[0]!r}"
        if isinstance(node, ast.Dict):
            keys = [k.value for k in node.keys if isinstance(k, ast.Constant)]
            assert not (set(keys) & names), f"{name}:{node.lineno}: a table keyed by operator names"
