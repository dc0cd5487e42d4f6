"""Case folders in, golden cases out: the layout ``refspec export`` writes, read back
(docs/real_runs.md, "Case folders"; the layout is docs/goldens.md section 7).

A case folder holds ``case.json`` and one file per input, named after its aclnn parameter
(``dy.bin``, ``gradQueryOutput.npy``: the record's
``refspec.ops.record.Operator.tensor_file``), ``.bin`` or ``.npy``. Expected outputs
(``golden_dx.bin``) and a kernel's outputs (``dx.bin``) may lie beside them; they are not
inputs and are left alone. An input without a file is
absent (the profile's validation decides whether that is allowed). ``case.json`` needs only
``operator``, ``soc`` and ``attributes``; a ``.npy`` tells its own shape and dtype, a ``.bin``
needs them from a ``files`` entry (``name``, ``shape``, ``dtype``) or the top-level ``dtype``.
What ``refspec export`` writes besides (``parameters``, ``case_id``, ``seed``,
``distribution``, ``expected_error``, ``regenerate``, each file's ``byte_size`` and ``sha256``)
is kept or checked, so an exported folder gives back the case it came from, bit for bit.
Every file is read only from inside its folder: a symbolic link that leads elsewhere is refused
(``refspec.goldens.format.inside``).
"""

from __future__ import annotations

import json
import os
import shlex

from .. import ops
from ..ops.record import Call
from ..spec.errors import one_line
from ..goldens.case_files import CASE_JSON, EXPORT_SCHEMA
from ..goldens.format import OutsideError, inside
from .tensor_files import (TensorFileError, bin_spec, npy_spec, read_tensor, sha256_of,
                           tensor_dtype)
from .user_cases import UNSTATED, InputError, UserCase, attribute_value

__all__ = ["CASE_JSON", "find_folders", "describe_folder", "describe_folders"]

_EXTENSIONS = (".bin", ".npy")
_FIELDS = {"schema", "case_id", "operator", "aclnn_operator", "parameters", "attributes", "seed",
           "soc", "distribution", "expected_error", "expected_code", "status_file", "regenerate",
           "source", "format", "byte_order", "order", "files", "dtype"}


def find_folders(paths) -> list[tuple[str, str]]:
    """(folder, its default case id) for each path: a case folder itself, or every folder with
    a case.json below it (an export directory), its path below it being the default id."""
    out = []
    for root in paths:
        root = os.fspath(root)
        if not os.path.isdir(root):
            raise InputError(f"{root}: not a directory (a case folder holds {CASE_JSON} and one "
                             "file per input)")
        if os.path.isfile(os.path.join(root, CASE_JSON)):
            out.append((root, os.path.basename(os.path.abspath(root))))
            continue
        found = []
        for d, dirs, files in os.walk(root):
            dirs.sort()
            if CASE_JSON in files:
                found.append(d)
        if not found:
            raise InputError(f"{root}: no {CASE_JSON} in it or in its subfolders (a case "
                             f"folder holds {CASE_JSON} and one file per input)")
        out += [(d, os.path.relpath(d, root).replace(os.sep, "/")) for d in found]
    return out


class _Folder:
    """The reading of one folder: its case.json and where errors point."""

    def __init__(self, folder: str):
        self.folder = folder
        path = self.path_of(CASE_JSON)
        try:
            with open(path, encoding="utf-8") as fh:
                doc = json.load(fh)
        except (OSError, ValueError) as exc:
            self.fail(f"not readable JSON ({one_line(exc)})")
        if not isinstance(doc, dict):
            self.fail("must be a JSON object")
        unknown = set(doc) - _FIELDS
        if unknown:
            self.fail(f"unknown field(s) {', '.join(sorted(unknown))}; allowed: "
                      f"{', '.join(sorted(_FIELDS))}")
        if doc.get("schema", EXPORT_SCHEMA) != EXPORT_SCHEMA:
            self.fail(f"schema {doc['schema']!r} is not {EXPORT_SCHEMA!r}")
        self.doc = doc

    def fail(self, what: str, file: str = CASE_JSON):
        raise InputError(f"{self.folder}: {file}: {what}")

    def path_of(self, name: str) -> str:
        """The file ``name`` of the folder, which must lie inside it once symbolic links are
        resolved (InputError otherwise)."""
        try:
            inside(self.folder, name)
        except OutsideError as exc:
            self.fail(f"refused: {exc}", name)
        return os.path.join(self.folder, name)

    # --- case.json pieces ---------------------------------------------------------------------
    def operator(self) -> ops.Operator:
        name = self.doc.get("operator") or self.doc.get("aclnn_operator")
        known = ", ".join(o.id for o in ops.OPERATORS.values())
        if not name:
            self.fail(f'no "operator": name one of {known} (or its spec function or aclnn name)')
        op = ops.find(name)
        if op is None:
            self.fail(f"operator {name!r} is unknown; known: {known}")
        return op

    def soc(self, op: ops.Operator):
        if "soc" not in self.doc:
            self.fail('no "soc": give the chip profile whose rules validate the inputs ('
                      + ", ".join(s for s in op.socs if s) + ", or null for math only)")
        soc = self.doc["soc"]
        if soc is not None and not isinstance(soc, str):
            self.fail(f"soc {soc!r} must be a profile name ("
                      + ", ".join(s for s in op.socs if s) + ") or null for math only")
        return None if soc in (None, "", "none") else soc

    def attributes(self, op: ops.Operator) -> dict:
        """The spec's attributes: from ``attributes`` (aclnn or spec names; numbers, booleans
        or the labels their axes read, ``"half"``) and from ``parameters`` (what ``refspec
        export`` writes, in any schema), which must agree."""
        given, params = self.doc.get("attributes"), self.doc.get("parameters")
        if params is not None and not isinstance(params, dict):
            self.fail('"parameters" must be an object')
        allowed = ", ".join(op.attributes)
        if given is None and params is None and op.attributes:
            self.fail(f'no "attributes": give those of {op.title} ({allowed}), e.g. '
                      + json.dumps({a: v for a, v in op.complete_attrs({}).items()}))
        attrs = self._given_attributes(op, given) if given is not None else {}
        stated = op.attrs_of(op.upgrade_params(params)) if params is not None else {}
        for a, value in stated.items():
            if a in attrs and attrs[a] != value:
                self.fail(f"attribute {a!r} is {attrs[a]!r} but parameters say {value!r}")
            attrs.setdefault(a, value)
        return op.complete_attrs(attrs)

    def _given_attributes(self, op: ops.Operator, given) -> dict:
        if not isinstance(given, dict):
            self.fail('"attributes" must be an object')
        names = {**{ops.camel_case(a): a for a in op.attributes}, **{a: a for a in op.attributes}}
        attrs = {}
        for key, value in given.items():
            if key not in names:
                self.fail(f"attribute {key!r} is not one of {op.title}'s "
                          f"({', '.join(op.attributes)})")
            if not attribute_value(value):
                self.fail(f"attribute {key!r} = {value!r}: must be a number, a boolean, a "
                          "label or a list of numbers")
            attrs[names[key]] = value
        try:
            return op.spec_attrs(attrs)
        except ValueError as exc:
            self.fail(f"attribute {exc}")

    def expected_code(self):
        code = self._stated_code()
        if "expected_code" in self.doc and code is not UNSTATED:
            if self.doc["expected_code"] != (code or 0):
                self.fail(f'"expected_code" {self.doc["expected_code"]!r} contradicts '
                          f'"expected_error" (code {code or 0})')
        elif "expected_code" in self.doc:
            given = self.doc["expected_code"]
            if not isinstance(given, int) or isinstance(given, bool):
                self.fail('"expected_code" must be an integer (0 for a positive case)')
            return given or None
        return code

    def _stated_code(self):
        if "expected_error" not in self.doc:
            return UNSTATED
        err = self.doc["expected_error"]
        if err is None:
            return None
        if not isinstance(err, dict) or not isinstance(err.get("code"), int):
            self.fail('"expected_error" must be null or an object with an integer "code"')
        return err["code"]

    # --- files --------------------------------------------------------------------------------
    def entries(self) -> dict:
        files = self.doc.get("files", [])
        if not isinstance(files, list):
            self.fail('"files" must be a list of objects with name, shape and dtype')
        out = {}
        for i, e in enumerate(files):
            if not isinstance(e, dict) or not isinstance(e.get("name"), str):
                self.fail(f"files[{i}] must be an object with a \"name\"")
            if os.path.basename(e["name"]) != e["name"] or not e["name"].endswith(_EXTENSIONS):
                self.fail(f"files[{i}]: {e['name']!r} must be a .bin or .npy file in the folder")
            out[e["name"]] = e
        return out

    def _dtype(self, value, where: str):
        if value is None:
            return None
        try:
            return tensor_dtype(value)
        except ValueError as exc:
            self.fail(f"{where}: {exc}")

    def tensor_file(self, name: str, entry: dict | None):
        path = self.path_of(name)
        entry = entry or {}
        where = f"files entry {name!r}"
        dtype = self._dtype(entry.get("dtype"), where)
        shape = entry.get("shape")
        if shape is not None and (not isinstance(shape, list)
                                  or not all(isinstance(s, int) and s >= 0 for s in shape)):
            self.fail(f"{where}: shape must be a list of sizes >= 0, got {shape!r}")
        try:
            if name.endswith(".npy"):
                spec = npy_spec(path, dtype, shape)
            else:
                default = self._dtype(self.doc.get("dtype"), '"dtype"')
                if (dtype or default) is None or shape is None:
                    missing = " and ".join(w for w, v in (("shape", shape),
                                                          ("dtype", dtype or default)) if v is None)
                    self.fail(f"a raw .bin has no header: give its {missing} in a files entry "
                              f'{{"name": "{name}", "shape": [...], "dtype": "..."}}'
                              + ("" if dtype or default else ' (or a top-level "dtype")'))
                spec = bin_spec(path, dtype or default, shape)
        except (TensorFileError, OSError) as exc:
            raise InputError(one_line(exc)) from None
        if "byte_size" in entry and os.path.getsize(path) != entry["byte_size"]:
            self.fail(f"{name} has {os.path.getsize(path)} bytes but its files entry says "
                      f"byte_size {entry['byte_size']}")
        if "sha256" in entry and sha256_of(path) != entry["sha256"]:
            self.fail(f"{name} changed since {CASE_JSON} was written (its sha256 differs); "
                      "remove the entry's sha256 to use the file as it is")
        return spec

    def inputs(self, op: ops.Operator) -> dict:
        """{input name: TensorFile} of the files present (absent inputs left out)."""
        entries = self.entries()
        stems = {}
        for t in op.inputs:
            for stem in op.file_stems(t.name):
                stems.setdefault(stem, t.name)
        outputs = {stem for o in op.outputs for stem in op.file_stems(o.name)}
        found: dict = {}
        for name, e in entries.items():              # entries may name any file
            if e.get("role", "input") != "input":
                continue
            tensor = e.get("python_name") or e.get("aclnn_name") or os.path.splitext(name)[0]
            try:
                tensor = op.python_name(tensor)
            except KeyError:
                self.fail(f"files entry {name!r}: {tensor!r} is not an input of {op.title} "
                          f"(inputs: {', '.join(op.input_names)})")
            if tensor not in op.input_names:
                self.fail(f"files entry {name!r}: {tensor!r} is an output of {op.title}, not an "
                          "input (give it role \"golden\" or leave it out)")
            if not os.path.isfile(os.path.join(self.folder, name)):
                self.fail(f"{name} is listed in {CASE_JSON} but is not in the folder", name)
            if tensor in found:
                self.fail(f"two files for input {tensor!r}: {found[tensor][0]} and {name}")
            found[tensor] = (name, e)
        listed = {name for name, _ in found.values()}
        for name in sorted(os.listdir(self.folder)):
            stem, ext = os.path.splitext(name)
            if ext not in _EXTENSIONS or name in listed or name in entries:
                continue
            if stem in stems:
                tensor = stems[stem]
                if tensor in found:
                    self.fail(f"two files for input {tensor!r}: {found[tensor][0]} and {name}",
                              name)
                found[tensor] = (name, None)
            elif not (stem.startswith("golden_") or stem in outputs):
                self.fail(f"not an input of {op.title}: its input files are "
                          + ", ".join(op.tensor_file(n) for n in op.input_names)
                          + " (or .npy); expected outputs are golden_<output>", name)
        if not found:
            self.fail("no input file: expected files such as "
                      + ", ".join(op.tensor_file(n) for n in op.input_names[:3]))
        return {t: self.tensor_file(name, e)
                for t in op.input_names if t in found for name, e in (found[t],)}


def describe_folder(folder: str, default_id: str) -> UserCase:
    """The case of one folder (InputError naming the folder and file for anything missing or
    inconsistent); no tensor data is read until its ``load()``."""
    f = _Folder(folder)
    op = f.operator()
    soc = f.soc(op)
    attrs = f.attributes(op)
    specs = f.inputs(op)
    doc = f.doc
    params = op.params_of(Call(specs, attrs, soc))
    dtype = params["dtype"]
    if doc.get("parameters") is not None:
        stated = op.upgrade_params(doc["parameters"])
        for key, have in (("dtype", dtype), ("soc", soc)):
            if key in stated and stated[key] != have:
                f.fail(f"parameters say {key} {stated[key]!r} but "
                       + ("the files give" if key == "dtype" else "case.json's soc is")
                       + f" {have!r}")
        params = {**params, **stated}
    else:
        params.update(dist=str(doc.get("distribution", "user")), folder=folder)
    case_id = doc.get("case_id")
    if case_id is None:
        case_id = default_id if default_id.startswith(op.id + "/") else f"{op.id}/{default_id}"
    elif not isinstance(case_id, str):
        f.fail('"case_id" must be a string')
    seed = doc.get("seed") or 0
    if not isinstance(seed, int):
        f.fail('"seed" must be an integer')
    regenerate = doc.get("regenerate") or (
        f"refspec golden {shlex.quote(folder)} -o {shlex.quote(case_id.replace('/', '_') + '.h5')}")
    return UserCase(where=folder, case_id=case_id, op=op, params=params,
                    load=lambda: {k: read_tensor(s) for k, s in specs.items()}, seed=seed,
                    regenerate=str(regenerate), expected_code=f.expected_code())


def describe_folders(paths) -> list[UserCase]:
    """The cases of every folder under ``paths`` (see ``find_folders``)."""
    return [describe_folder(folder, default) for folder, default in find_folders(paths)]
