"""The package's shape (docs/architecture.md): layers in folders, imports only downward, no import
cycles, every module reachable by its dotted name, no operator branches outside the records,
and none of the process or memory machinery the project does not use."""

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


def imported(name: str, top_level_only: bool = False) -> set[str]:
    """The refspec modules ``name`` imports (absolute names; relative imports resolved)."""
    tree = ast.parse(source(name).read_text())
    package = name if source(name).name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    nodes = tree.body if top_level_only else ast.walk(tree)
    for node in nodes:
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


def test_no_import_cycles():
    graph = {m: {t for t in imported(m, top_level_only=True) if t in MODULES and t != m}
             for m in MODULES}
    state: dict[str, int] = {}

    def visit(m, path):
        state[m] = 1
        for t in graph[m]:
            if state.get(t) == 1:
                pytest.fail("import cycle: " + " -> ".join(path[path.index(t):] + [t]))
            if t not in state:
                visit(t, path + [t])
        state[m] = 2

    for m in MODULES:
        if m not in state:
            visit(m, [m])


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
    assert out.stdout.split() == ["refspec.comparator.run", "refspec.goldens"]


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
