"""Golden cases from the API calls of an msprobe dump, as a mapping file (MAP.toml) names them
(docs/real_runs.md, "The mapping file", line by line).

Each ``[[api]]`` table names an API as dump.json spells it (``npu_rotary_position_embedding``,
with or without its prefix ``NPU.``/``MindSpeed.``), the refspec operator it is, the chip
profile, where each spec tensor is in the call's records (``forward.input.0`` is the first
positional argument of the forward record, ``forward.kwargs.NAME`` a keyword argument,
``forward.output.0`` the first output, ``backward.input.0`` the gradient of the first forward
output, ``backward.output.0`` the gradient of the first forward input), the attributes (read
from the dump by the same references, or given as values), and where the kernel's outputs are.
Every call of that API in every selected step and rank becomes one case; its parameters keep
the dump records, so ``refspec compare OUT.h5 --msprobe DUMP`` finds the outputs again
(``dump_entries``).
"""

from __future__ import annotations

import json
import os
import shlex
import sys

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from .. import ops
from ..ops.record import Call
from ..spec.errors import one_line
from .msprobe_dump import (FIELDS, STAGES, Dump, DumpError, DumpTensor, open_dumps,
                           what_records)
from .user_cases import InputError, UserCase, attribute_value

__all__ = ["ApiMap", "DumpMap", "load_map", "parse_ref", "describe_dump", "dump_entries"]

_TOP = {"step", "rank", "api"}
_API = {"name", "operator", "soc", "calls", "inputs", "attributes", "outputs"}


def parse_ref(text, where: str):
    """``"backward.output.0"`` -> (stage, dump.json field, key): key an int for the lists
    (``input``, ``output``), a name for ``kwargs``. InputError naming ``where`` otherwise."""
    parts = text.split(".") if isinstance(text, str) else []
    if len(parts) != 3 or parts[0] not in STAGES or parts[1] not in FIELDS[parts[0]]:
        raise InputError(f"{where}: {text!r} is not a dump reference; write STAGE.LIST.POSITION "
                         "with STAGE forward or backward and LIST input, output (forward also "
                         "kwargs), e.g. \"forward.input.0\", \"forward.kwargs.mode\", "
                         "\"backward.output.1\"")
    stage, field, key = parts[0], FIELDS[parts[0]][parts[1]], parts[2]
    if field == "input_kwargs":
        return stage, field, key
    if not key.isdigit():
        raise InputError(f"{where}: {text!r}: the position in {parts[0]}.{parts[1]} must be a "
                         "number (0 for the first)")
    return stage, field, int(key)


def _check_keys(table, allowed, where: str, what: str) -> None:
    """``table`` is a table whose keys are all in ``allowed`` (InputError otherwise)."""
    if not isinstance(table, dict):
        raise InputError(f"{where}: must be a table of {what}")
    unknown = set(table) - set(allowed)
    if unknown:
        raise InputError(f"{where}: unknown key(s) {', '.join(sorted(unknown))}; allowed: {what}")


class ApiMap:
    """One ``[[api]]`` table, checked against the operator's record."""

    def __init__(self, table: dict, where: str):
        self.where = where
        _check_keys(table, _API, where, ", ".join(sorted(_API)))
        for key in ("name", "operator", "soc", "inputs"):
            if key not in table:
                raise InputError(f"{where}: needs {key!r} (name, operator, soc, inputs, and "
                                 "usually attributes and outputs)")
        self.name = table["name"]
        if not isinstance(self.name, str) or not self.name:
            raise InputError(f"{where}: name must be the API's name as dump.json spells it")
        op = ops.find(table["operator"])
        if op is None:
            raise InputError(f"{where}: operator {table['operator']!r} is unknown; known: "
                             + ", ".join(o.id for o in ops.OPERATORS.values()))
        self.op = op
        soc = table["soc"]
        if not isinstance(soc, str):
            raise InputError(f"{where}: soc must be a profile name ("
                             + ", ".join(s for s in op.socs if s) + ") or \"none\" (math only)")
        self.soc = None if soc in ("", "none") else soc
        calls = table.get("calls")
        if calls is not None and (not isinstance(calls, list) or not calls
                                  or not all(isinstance(c, int) and c >= 0 for c in calls)):
            raise InputError(f"{where}: calls must be a list of call numbers, e.g. [0, 1]")
        self.calls = calls
        self.inputs = self._tensors(table["inputs"], "inputs", op.input_names)
        self.outputs = self._tensors(table.get("outputs", {}), "outputs", op.output_names)
        for name, (_, field, key) in self.outputs.items():
            if field == "input_kwargs":
                raise InputError(f"{where}: outputs.{name}: outputs are in an output or input "
                                 "list, not in kwargs")
        self.attributes = self._attributes(table.get("attributes", {}))

    def _tensors(self, table, key: str, allowed) -> dict:
        if not isinstance(table, dict):
            raise InputError(f"{self.where}: {key} must be a table of NAME = \"STAGE.LIST.N\"")
        out = {}
        for name, ref in table.items():
            try:
                py = self.op.python_name(name)
            except KeyError:
                py = None
            if py not in allowed:
                raise InputError(f"{self.where}: {key}.{name}: not one of {self.op.title}'s "
                                 f"{key} ({', '.join(allowed)})")
            out[py] = parse_ref(ref, f"{self.where}: {key}.{name}")
        return out

    def _attributes(self, table) -> dict:
        if not isinstance(table, dict):
            raise InputError(f"{self.where}: attributes must be a table")
        names = {**{ops.camel_case(a): a for a in self.op.attributes},
                 **{a: a for a in self.op.attributes}}
        out = {}
        for name, value in table.items():
            if name not in names:
                raise InputError(f"{self.where}: attributes.{name}: not one of {self.op.title}'s "
                                 f"attributes ({', '.join(self.op.attributes) or 'none'})")
            if isinstance(value, str) and value.split(".")[0] in STAGES:
                out[names[name]] = parse_ref(value, f"{self.where}: attributes.{name}")
            elif attribute_value(value):
                try:                   # a value in any spelling its axis reads ("half", 0)
                    out.update(self.op.spec_attrs({names[name]: value}))
                except ValueError as exc:
                    raise InputError(f"{self.where}: attributes.{exc}") from None
            else:
                raise InputError(f"{self.where}: attributes.{name} must be a number, a boolean, "
                                 "a label (\"half\"), a list of numbers ([16, 24, 24]) or a "
                                 "dump reference such as \"forward.kwargs.rotary_mode\"")
        return out

    @property
    def stages(self) -> list[str]:
        """The records the inputs and attributes are read from."""
        refs = list(self.inputs.values()) + [v for v in self.attributes.values()
                                             if isinstance(v, tuple)]
        return [s for s in STAGES if any(r[0] == s for r in refs)]

    def matches(self, api: str) -> bool:
        return api == self.name or api.endswith("." + self.name)


class DumpMap:
    """A mapping file: ``step``, ``rank`` (None: every one) and its ``[[api]]`` tables."""

    def __init__(self, data: dict, path: str):
        self.path = path
        _check_keys(data, _TOP, path, "step, rank, [[api]]")
        for key in ("step", "rank"):
            if data.get(key) is not None and not isinstance(data[key], int):
                raise InputError(f"{path}: {key} must be a number")
        self.step, self.rank = data.get("step"), data.get("rank")
        apis = data.get("api")
        if not isinstance(apis, list) or not apis:
            raise InputError(f"{path}: needs at least one [[api]] table naming an API of the dump")
        self.apis = [ApiMap(t, f"{path}: [[api]] {i + 1}") for i, t in enumerate(apis)]


def load_map(path) -> DumpMap:
    """Read a mapping file (TOML, or JSON for a ``.json`` name)."""
    path = os.fspath(path)
    try:
        with open(path, "rb") as fh:
            raw = fh.read().decode("utf-8")
        data = json.loads(raw) if path.lower().endswith(".json") else tomllib.loads(raw)
    except OSError as exc:
        raise InputError(f"{path}: {exc.strerror or exc}") from None
    except (ValueError, UnicodeDecodeError) as exc:
        kind = "JSON" if path.lower().endswith(".json") else "TOML"
        raise InputError(f"{path}: not valid {kind} ({one_line(exc)})") from None
    return DumpMap(data, path)


# --- one call of one API -------------------------------------------------------------------------

def _ref_text(ref) -> str:
    stage, field, key = ref
    short = {v: k for k, v in FIELDS[stage].items() if k in ("input", "kwargs", "output")}
    return f"{stage}.{short.get(field, field)}.{key}"


def _check_pair(dump: Dump, forward: str, backward: str) -> None:
    """The backward record must be this call's: the gradient of each forward output has that
    output's shape, the gradient of each forward input that input's shape (a module's
    gradients placed by ``Dump.entries``)."""
    for bfield, ffield in (("input", "output"), ("output", "input_args")):
        if bfield not in dump.record(backward) or ffield not in dump.record(forward):
            continue
        grads, values = dump.entries(backward, bfield), dump.entries(forward, ffield)
        if not isinstance(grads, list) or not isinstance(values, list):
            continue
        for i, (g, v) in enumerate(zip(grads, values)):
            if not (isinstance(g, dict) and isinstance(v, dict) and "shape" in g and "shape" in v):
                continue
            if list(g["shape"]) != list(v["shape"]):
                raise InputError(
                    f"{dump.path}: {forward} and {backward} are not one call: {bfield}[{i}] of "
                    f"the backward has shape {tuple(g['shape'])} but {ffield}[{i}] of the forward "
                    f"has shape {tuple(v['shape'])} (check the call numbers, e.g. with "
                    "recomputation a forward runs twice)")


def _attribute(dump: Dump, records: dict, ref, where: str):
    """The value of a dumped argument: a number, boolean or string, or a tuple of numbers (a
    list argument, which dump.json records as a list of values)."""
    stage, field, key = ref
    item = dump.item(records[stage], field, key)
    if isinstance(item, list):
        value = tuple(v.get("value") if isinstance(v, dict) else None for v in item)
        if attribute_value(value):
            return value
        value = None
    else:
        value = item.get("value") if isinstance(item, dict) else None
    if not isinstance(value, (bool, int, float, str)):
        raise InputError(f"{where}: {records[stage]} {field}[{key}] is "
                         f"{json.dumps(item)[:80]}, not a value; give the attribute's value "
                         "in the mapping file instead")
    return value


def _call_case(m: ApiMap, dump: Dump, api: str, call: int, records: dict, source: str) -> UserCase:
    where = f"{dump.path}: {api}.{call}"
    for stage in m.stages:
        if stage not in records:
            others = sorted(c for c, r in dump.apis()[api].items() if stage in r)
            raise InputError(f"{where}: no {stage} record {api}.{call}.{stage}, which the "
                             f"mapping file reads ({m.where}); {stage} records exist for calls "
                             f"{', '.join(map(str, others)) or 'none'}")
    if "forward" in records and "backward" in records:
        _check_pair(dump, records["forward"], records["backward"])
    tensors: dict[str, DumpTensor] = {}
    for name, (stage, field, key) in m.inputs.items():
        t = dump.tensor(records[stage], field, key)
        spec_tensor = next(s for s in m.op.inputs if s.name == name)
        if t.dtype is None or not spec_tensor.allows(t.dtype):
            allowed = "an integer dtype" if spec_tensor.is_index else (
                "float16, bfloat16, float32 or float64")
            raise InputError(f"{where}: input {name} ({_ref_text((stage, field, key))}) has dtype "
                             f"{t.dtype_text!r}, not {allowed}")
        if t.data_name is None or not os.path.isfile(t.path):
            raise InputError(f"{where}: input {name} ({_ref_text((stage, field, key))}): "
                             + ("no data_name (the dump holds statistics only: dump with task = "
                                "\"tensor\")" if t.data_name is None
                                else f"{t.path} does not exist"))
        tensors[name] = t
    op = m.op
    tensors = {k: tensors[k] for k in op.input_names if k in tensors}     # the record's order
    attrs = {a: (_attribute(dump, records, v, where) if isinstance(v, tuple) else v)
             for a, v in m.attributes.items()}
    try:                       # torch_npu's labels (rotary_mode="half") read by the axes
        attrs = op.complete_attrs(op.spec_attrs(attrs))
    except ValueError as exc:
        raise InputError(f"{where}: attribute {exc} (read for {m.where})") from None
    label = "" if dump.name == "." else dump.name
    info = {"path": dump.name, "step": dump.step, "rank": dump.rank, "api": api, "call": call,
            **{stage: records.get(stage) for stage in STAGES},
            "inputs": {k: _ref_text(v) for k, v in m.inputs.items()},
            "outputs": {k: _ref_text(v) for k, v in m.outputs.items()}}
    params = {**op.params_of(Call(tensors, attrs, m.soc)), "dist": "msprobe", "dump": info}
    case_id = "/".join(p for p in (op.id, "msprobe", label, f"{api}.{call}") if p)

    def load():
        try:
            return {k: t.load(exact=True) for k, t in tensors.items()}
        except DumpError as exc:
            raise InputError(str(exc)) from None

    return UserCase(where=where, case_id=case_id, op=op, params=params, load=load,
                    regenerate=source)


def describe_dump(dump_path, mapping) -> list[UserCase]:
    """One case per mapped call of every selected dump (InputError for anything the map names
    that the dump does not hold)."""
    m = mapping if isinstance(mapping, DumpMap) else load_map(mapping)
    try:
        dumps = open_dumps(dump_path)
    except DumpError as exc:
        raise InputError(str(exc)) from None
    chosen = [d for d in dumps if (m.step is None or d.step == m.step)
              and (m.rank is None or d.rank == m.rank)]
    if not chosen:
        raise InputError(f"{dump_path}: no dump for step={m.step} rank={m.rank} (found: "
                         + ", ".join(d.described for d in dumps)
                         + f"); see step and rank in {m.path}")
    source = (f"refspec golden --msprobe {shlex.quote(os.fspath(dump_path))} "
              f"--map {shlex.quote(m.path)} -o OUT.h5")
    cases = []
    for am in m.apis:
        hits = 0
        for dump in chosen:
            apis = {a: calls for a, calls in dump.apis().items() if am.matches(a)}
            if len(apis) > 1:
                raise InputError(f"{am.where}: name {am.name!r} matches several APIs of "
                                 f"{dump.path} ({', '.join(sorted(apis))}); give the full name")
            for api, calls in apis.items():
                numbers = sorted(calls)
                for c in am.calls or ():
                    if c not in calls:
                        raise InputError(f"{dump.path}: {api} has no call {c} (calls: "
                                         f"{', '.join(map(str, numbers))}); see calls in "
                                         f"{am.where}")
                for call in (am.calls if am.calls is not None else numbers):
                    try:
                        cases.append(_call_case(am, dump, api, call, calls[call], source))
                    except DumpError as exc:
                        raise InputError(f"{exc} (read for {am.where})") from None
                    hits += 1
        if not hits:
            raise InputError(f"{am.where}: no API {am.name!r} in the dump {dump_path} (its "
                             f"{what_records(chosen)})")
    return cases


def dump_entries(case_id: str, params: dict) -> list[dict]:
    """Comparator mapping entries (``refspec.inputs.output_map.Mapping``) for the outputs
    of a case built from a dump: each to its record, list and position, step and rank."""
    info = params.get("dump")
    if not isinstance(info, dict):
        return []
    out = []
    for name, text in (info.get("outputs") or {}).items():
        stage, field, key = parse_ref(text, f"case {case_id}")
        if info.get(stage) is None:
            continue
        out.append({"api": info[stage], "field": field, "index": key, "case": case_id,
                    "output": name, "step": info.get("step"), "rank": info.get("rank")})
    return out
