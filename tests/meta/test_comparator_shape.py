"""The comparator stays as easy to read as the spec: no function in refspec/comparator (its four
rooms included) longer than 60 lines (its body, the docstring left out) or with more than 8
parameters (a method's self or cls not counted; ``refspec.comparator.comparison.compare``
excepted, whose keyword arguments are the documented public API), and no subscript of a named
tuple by an integer constant where it can be seen: ``flags``, ``params``, ``ints`` and
``floats`` (the compiled pass's arguments and results, which have names:
``flags.exempt_rounded``, ``ints[INTS_AT.n_special]``)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import refspec

COMPARATOR = Path(refspec.__file__).parent / "comparator"
MODULES = sorted(COMPARATOR.rglob("*.py"))
MAX_LINES, MAX_PARAMETERS = 60, 8
#: (module, function) allowed more parameters: the documented keyword arguments of compare()
MANY_PARAMETERS = {("comparison.py", "compare")}
#: names that hold named tuples (or arrays laid out by one) in the comparator
NAMED = {"flags", "params", "ints", "floats"}


def _functions(tree):
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield node


def body_lines(node) -> int:
    """Lines from the first statement after the docstring to the function's end."""
    body = node.body
    if (body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
            and isinstance(body[0].value.value, str)):
        body = body[1:]
    return node.end_lineno - body[0].lineno + 1 if body else 0


def parameters(node) -> int:
    a = node.args
    n = len(a.posonlyargs) + len(a.args) + len(a.kwonlyargs)
    n += (a.vararg is not None) + (a.kwarg is not None)
    return n - int(bool(a.args) and a.args[0].arg in ("self", "cls"))


def _name(node) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def _int_constant(node) -> bool:
    if isinstance(node, ast.Tuple):
        return any(_int_constant(e) for e in node.elts)
    if isinstance(node, ast.UnaryOp):
        node = node.operand
    return (isinstance(node, ast.Constant) and isinstance(node.value, int)
            and not isinstance(node.value, bool))


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.relative_to(COMPARATOR).as_posix())
def test_functions_are_short_and_take_few_parameters(path):
    bad = []
    for node in _functions(ast.parse(path.read_text())):
        n, length = parameters(node), body_lines(node)
        if length > MAX_LINES:
            bad.append(f"{path.name}:{node.lineno} {node.name}: {length} lines")
        if n > MAX_PARAMETERS and (path.name, node.name) not in MANY_PARAMETERS:
            bad.append(f"{path.name}:{node.lineno} {node.name}: {n} parameters")
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.relative_to(COMPARATOR).as_posix())
def test_no_named_tuple_is_indexed_by_position(path):
    bad = [f"{path.name}:{node.lineno} {ast.unparse(node)}"
           for node in ast.walk(ast.parse(path.read_text()))
           if isinstance(node, ast.Subscript) and _name(node.value) in NAMED
           and _int_constant(node.slice)]
    assert not bad, "\n".join(bad)


def test_the_checks_see_what_they_look_for():
    """The checks themselves: a long function, a many-parameter one and flags[9] are found."""
    src = ("def f(a, b, c, d, e, f, g, h, i):\n    '''doc'''\n" + "    x = 1\n" * 61
           + "    return flags[9] + out.ints[5] + params[-1] + floats[0, k]\n")
    node = next(_functions(ast.parse(src)))
    assert parameters(node) == 9 and body_lines(node) == 62
    subs = [s for s in ast.walk(node) if isinstance(s, ast.Subscript)
            and _name(s.value) in NAMED and _int_constant(s.slice)]
    assert len(subs) == 4
    assert body_lines(next(_functions(ast.parse("def g(self):\n    '''only a doc'''\n")))) == 0
