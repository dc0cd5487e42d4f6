"""Constraints of sweep blocks: a whitelisted expression language (docs/sweeps.md,
"Constraints").

A constraint is an expression such as ``"mode == 'half' or cos == '11SD'"`` or
``"B * N <= 1024"`` over a case's axis values and sizes. It is parsed with ``ast`` and checked
against a whitelist when the sweep loads; evaluation walks the checked tree, and nothing reaches
``eval``.
"""

from __future__ import annotations

import ast
import operator

__all__ = ["SweepError", "ExprError", "Constraint", "FUNCTIONS"]


class SweepError(ValueError):
    """A sweep that cannot be found, parsed or validated; the message names file and place."""


class ExprError(SweepError):
    """A constraint outside the whitelist, or one that fails when evaluated."""


FUNCTIONS = {"min": min, "max": max, "abs": abs, "len": len}
_BINOPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
           ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod}
_CMPOPS = {ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le,
           ast.Gt: operator.gt, ast.GtE: operator.ge,
           ast.In: lambda a, b: a in b, ast.NotIn: lambda a, b: a not in b}
_UNARY = {ast.Not: operator.not_, ast.USub: operator.neg, ast.UAdd: operator.pos}


def _is_number(v) -> bool:
    """Arithmetic operands: int, float or bool (True = 1); never strings or tuples."""
    return isinstance(v, (int, float))


class Constraint:
    """A named constraint: an expression such as ``"mode == 'half' or cos == '11SD'"`` or
    ``"B * N <= 1024"`` over axis values and shape sizes.

    It is parsed with ``ast`` and checked against a whitelist when the sweep loads: names,
    literals (numbers, strings, booleans), ``and``/``or``/``not``, comparisons (``in`` too),
    ``+ - * // %`` on numbers, tuples/lists, and ``min``, ``max``, ``abs``, ``len``. Evaluation
    walks the checked tree; nothing reaches ``eval``.
    """

    def __init__(self, name: str, text):
        self.name = name
        self.text = text
        if not isinstance(text, str):
            raise ExprError(f"constraint {name!r} must be a string expression, got {text!r}")
        try:
            tree = ast.parse(text.strip(), mode="eval")
        except SyntaxError as exc:
            raise ExprError(f"constraint {name!r}: syntax error in {text!r} "
                            f"(column {exc.offset})") from None
        self._body = tree.body
        self.names: set[str] = set()
        self._check(self._body)

    def _reject(self, what: str):
        raise ExprError(f"constraint {self.name!r}: {what} is not allowed in {self.text!r}; "
                        "allowed: names, literals, and/or/not, comparisons, in, + - * // %, "
                        f"tuples, {', '.join(FUNCTIONS)}()")

    def _check(self, node) -> None:
        if isinstance(node, ast.Constant):
            if not isinstance(node.value, (int, float, str, bool)):
                self._reject(f"constant {node.value!r}")
        elif isinstance(node, ast.Name):
            if node.id not in FUNCTIONS:
                self.names.add(node.id)
        elif isinstance(node, ast.BoolOp):
            for v in node.values:
                self._check(v)
        elif isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
            self._check(node.operand)
        elif isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
            self._check(node.left)
            self._check(node.right)
        elif isinstance(node, ast.Compare) and all(type(o) in _CMPOPS for o in node.ops):
            self._check(node.left)
            for c in node.comparators:
                self._check(c)
        elif isinstance(node, (ast.Tuple, ast.List)):
            for e in node.elts:
                self._check(e)
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
              and node.func.id in FUNCTIONS and not node.keywords
              and not any(isinstance(a, ast.Starred) for a in node.args)):
            for a in node.args:
                self._check(a)
        elif isinstance(node, ast.Call):
            self._reject("call of " + (node.func.id if isinstance(node.func, ast.Name)
                                       else "an expression"))
        else:
            self._reject(type(node).__name__)

    def __call__(self, env: dict) -> bool:
        try:
            return bool(self._eval(self._body, env))
        except ExprError:
            raise
        except Exception as exc:  # ZeroDivisionError, comparisons of mixed types, ...
            raise ExprError(f"constraint {self.name!r} ({self.text!r}) failed: "
                            f"{type(exc).__name__}: {exc}") from None

    def _eval(self, node, env):
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Name):
            if node.id not in env:
                raise ExprError(f"constraint {self.name!r}: unknown name {node.id!r}")
            return env[node.id]
        if isinstance(node, ast.BoolOp):
            stop = (lambda v: not v) if isinstance(node.op, ast.And) else bool
            value = None
            for v in node.values:
                value = self._eval(v, env)
                if stop(value):
                    break
            return value
        if isinstance(node, ast.UnaryOp):
            value = self._eval(node.operand, env)
            if not isinstance(node.op, ast.Not) and not _is_number(value):
                raise ExprError(f"constraint {self.name!r}: unary minus/plus of {value!r}")
            return _UNARY[type(node.op)](value)
        if isinstance(node, ast.BinOp):
            left, right = self._eval(node.left, env), self._eval(node.right, env)
            if not (_is_number(left) and _is_number(right)):
                raise ExprError(f"constraint {self.name!r}: arithmetic needs numbers, got "
                                f"{left!r} and {right!r}")
            return _BINOPS[type(node.op)](left, right)
        if isinstance(node, ast.Compare):
            left = self._eval(node.left, env)
            for op, comp in zip(node.ops, node.comparators):
                right = self._eval(comp, env)
                if not _CMPOPS[type(op)](left, right):
                    return False
                left = right
            return True
        if isinstance(node, (ast.Tuple, ast.List)):
            return tuple(self._eval(e, env) for e in node.elts)
        return FUNCTIONS[node.func.id](*(self._eval(a, env) for a in node.args))
