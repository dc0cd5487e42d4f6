"""The mapping file: which tensor of a dump (or which key of a .npz) is which golden output.

TOML or JSON with a list of entries under ``map`` (docs/compare.md, "Mapping file")::

    step = 0          # msprobe only, optional: which step*/rank* dump to read
    rank = 0

    [[map]]
    data_name = "NPU.npu_rotary_mul.0.backward.output.0.pt"   # a file named in dump.json
    case = "rope_grad/mode=half/layout=BNSD/cos=11SD/dtype=bfloat16/x=1/B2N8S128D64"
    output = "dx"

    [[map]]
    api = "NPU.npu_rotary_mul.0.backward"   # an API call of dump.json ...
    index = 1                                # ... and the position in its "output" list
    case = "rope_grad/mode=half/layout=BNSD/cos=11SD/dtype=bfloat16/x=1/B2N8S128D64"
    output = "dcos"

    [[map]]
    key = "run3/dsin"                       # a .npz array name
    case = "..."
    output = "dsin"

``output`` takes the Python name (``grad_query``) or the aclnn one (``gradQuery``).
"""

from __future__ import annotations

import json
import os
import sys

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from .. import ops
from ..spec.errors import one_line

__all__ = ["MappingError", "Mapping", "load_mapping"]

_KINDS = ("data_name", "api", "key")
_FIELDS = {"data_name", "api", "index", "field", "key", "case", "output", "step", "rank"}


def _python_name(name: str) -> str:
    """The spec's name of an output given by its aclnn name in any operator's record."""
    for op in ops.OPERATORS.values():
        try:
            return op.python_name(name)
        except KeyError:
            continue
    return name


class MappingError(ValueError):
    """A mapping file that cannot be used (one clear line)."""


class Mapping:
    """Entries keyed by (case id, Python output name)."""

    def __init__(self, entries: list[dict], step=None, rank=None, path: str = "<mapping>"):
        self.path, self.step, self.rank = path, step, rank
        self.entries: dict[tuple[str, str], dict] = {}
        for i, e in enumerate(entries):
            where = f"{path}: map entry {i + 1}"
            if not isinstance(e, dict):
                raise MappingError(f"{where}: must be a table")
            unknown = set(e) - _FIELDS
            if unknown:
                raise MappingError(f"{where}: unknown field(s) {', '.join(sorted(unknown))}; "
                                   f"allowed: {', '.join(sorted(_FIELDS))}")
            kinds = [k for k in _KINDS if k in e]
            if len(kinds) != 1:
                raise MappingError(f"{where}: give exactly one of data_name, api (+ index), key")
            if "case" not in e or "output" not in e:
                raise MappingError(f"{where}: needs case and output")
            if "api" in e and not isinstance(e.get("index", 0), int):
                raise MappingError(f"{where}: index must be an integer")
            out = _python_name(str(e["output"]))
            key = (str(e["case"]), out)
            if key in self.entries:
                raise MappingError(f"{where}: case {key[0]!r} output {key[1]!r} is mapped twice")
            self.entries[key] = dict(e, output=out)

    def entry(self, case_id: str, output: str) -> dict | None:
        return self.entries.get((case_id, output))

    def key_for(self, case_id: str, output: str) -> str | None:
        e = self.entry(case_id, output)
        return None if e is None or "key" not in e else str(e["key"])


def load_mapping(path) -> Mapping:
    """Read a TOML (``.toml``) or JSON mapping file; MappingError if it is not usable."""
    path = os.fspath(path)
    try:
        with open(path, "rb") as fh:
            raw = fh.read()
    except OSError as exc:
        raise MappingError(f"{path}: {exc.strerror or exc}") from None
    try:
        if path.lower().endswith(".json"):
            data = json.loads(raw.decode("utf-8"))
        else:
            data = tomllib.loads(raw.decode("utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise MappingError(f"{path}: not valid {'JSON' if path.lower().endswith('.json') else 'TOML'}"
                           f" ({one_line(exc)})") from None
    if isinstance(data, list):
        data = {"map": data}
    if not isinstance(data, dict) or not isinstance(data.get("map"), list):
        raise MappingError(f"{path}: needs a list of entries under 'map' ([[map]] in TOML)")
    return Mapping(data["map"], data.get("step"), data.get("rank"), path)
