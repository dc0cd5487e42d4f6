"""Printing a benchmark's results: one line per measurement, sections indented."""

from __future__ import annotations


def _value(v) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    if isinstance(v, dict):
        return ", ".join(f"{k} {_value(x)}" for k, x in v.items())
    if isinstance(v, tuple):
        return "(" + ", ".join(_value(x) for x in v) + ")"
    return str(v)


def print_results(results: dict) -> None:
    """``{section: {name: value}}`` and top-level ``{name: value}`` rows, floats to 4 digits."""
    for key, value in results.items():
        if isinstance(value, dict):
            print(key)
            for k, v in value.items():
                print(f"  {k}: {_value(v)}")
        else:
            print(f"{key}: {_value(value)}")
