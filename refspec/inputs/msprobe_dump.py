"""Reading msprobe dumps (MindStudio probe, PyPI ``mindstudio-probe``): the one reader behind
``refspec golden --msprobe`` and the comparator's msprobe source (docs/real_runs.md).

The layout, as msprobe writes it (its ``core/dump/service.py``, ``data_dump/json_writer.py`` and
``data_dump/data_processor/{base,pytorch_processor,mindspore_processor}.py``)::

    DUMP_PATH/[pynative/]step{N}/rank{R}/dump.json          (proc{PID} when there is no rank)
    DUMP_PATH/[pynative/]step{N}/rank{R}/dump_tensor_data/<data_name>

A ``proc{PID}`` folder is numbered as a rank, the way msprobe's own tooling numbers it
(``core/dump/dump2db/dump2db.py``): within a step, the proc folders in PID order after the
highest rank folder, from 0 when there is none (``step_rank``). A PID is never a rank.

``dump.json`` is ``{"task", "level", "framework": "pytorch"|"mindspore", "dump_data_dir",
"data": {record: {...}}}``. An API call has a forward record ``<Prefix>.<api>.<call>.forward``
with ``input_args`` (a list), ``input_kwargs`` (an object) and ``output`` (a list), and a
backward record ``<Prefix>.<api>.<call>.backward`` whose ``input`` lists the gradients of the
forward outputs and whose ``output`` lists the gradients of the forward inputs (``null`` where
an input gets none: not recorded). A module (levels L0 and mix) has the records
``Module.<path>.<Class>.forward.<call>`` and ``.backward.<call>`` (``Cell.`` in MindSpore); its
backward lists only the gradients of the positional inputs (and outputs) that require grad,
which the forward record's ``requires_grad`` flags say (``Dump.entries`` places them). A
tensor entry holds ``type``, ``dtype`` (``torch.bfloat16``, ``BFloat16``, ...), ``shape``,
statistics, ``requires_grad`` (PyTorch) and ``data_name`` (its file); other arguments are
``{"type": "int", "value": 0}``; absent ones null.
PyTorch saves each tensor with ``torch.save`` (``.pt``, bfloat16 kept), MindSpore with
``np.save`` (``.npy``, bfloat16 converted to float32). The JSON's dtype is authoritative: a
``.npy`` may also hold bfloat16 as uint16 bits or 2-byte voids.

``.npy`` files are read with ``allow_pickle=False``; ``.pt`` files only when PyTorch is
installed, with ``torch.load(weights_only=True)``. A dump.json or a ``data_name`` that leads
outside the dump path given (``..`` parts, an absolute path, a symbolic link) is refused
(``refspec.goldens.format.inside``). Every problem is a ``DumpError`` of one
line naming the dump.json, the record and the file.
"""

from __future__ import annotations

import glob
import json
import os
import re
from functools import cached_property

import numpy as np

from ..spec.dtypes import bfloat16, dtype_name
from ..spec.errors import one_line
from ..goldens.format import OutsideError, bits_to_bfloat16, inside
from .tensor_files import TensorFile, TensorFileError, read_npy_header, real_dtype_of

__all__ = ["DumpError", "Dump", "DumpTensor", "STAGES", "FIELDS", "parse_dtype", "step_rank",
           "find_dumps", "is_msprobe_dir", "split_record", "is_module", "open_dumps",
           "what_records", "folder_names"]

STAGES = ("forward", "backward")
#: the lists of a record, by stage, as a reference spells them ("forward.input.0")
FIELDS = {"forward": {"input": "input_args", "kwargs": "input_kwargs", "output": "output",
                      "input_args": "input_args", "input_kwargs": "input_kwargs"},
          "backward": {"input": "input", "output": "output"}}

_DTYPES = {"bfloat16": bfloat16, "float16": np.dtype(np.float16), "half": np.dtype(np.float16),
           "float32": np.dtype(np.float32), "float": np.dtype(np.float32),
           "float64": np.dtype(np.float64), "double": np.dtype(np.float64),
           "int64": np.dtype(np.int64), "long": np.dtype(np.int64), "int32": np.dtype(np.int32),
           "int": np.dtype(np.int32), "int16": np.dtype(np.int16), "int8": np.dtype(np.int8),
           "uint8": np.dtype(np.uint8)}
_RECORD = re.compile(r"^(?P<api>.+)\.(?P<call>\d+)\.(?P<stage>forward|backward)$")
#: a module's records put the stage before the call number: Module.0.rope.ApplyRope.forward.0
_MODULE_RECORD = re.compile(r"^(?P<api>(?:Module|Cell)\..+)\.(?P<stage>forward|backward)"
                            r"\.(?P<call>\d+)$")
_RANK_FOLDER = re.compile(r"^(rank|proc)(\d+)$")


class DumpError(ValueError):
    """A dump that cannot be used as asked: one line. ``kind`` says what went wrong for a
    tensor (missing, unreadable, dtype_mismatch, shape_mismatch; not_recorded: the entry is
    null, msprobe recorded nothing there)."""

    def __init__(self, message: str, kind: str = "unreadable"):
        super().__init__(message)
        self.kind = kind



def parse_dtype(text) -> np.dtype | None:
    """``torch.bfloat16``, ``BFloat16``, ``mindspore.float16``, ``Float32``, ``torch.int64``
    (an index tensor: positions) -> a dtype (None for anything else)."""
    if not isinstance(text, str):
        return None
    return _DTYPES.get(text.rsplit(".", 1)[-1].lower())


def split_record(name: str):
    """``NPU.npu_rotary_mul.0.backward`` -> ("NPU.npu_rotary_mul", 0, "backward"), a module's
    ``Module.0.rope.ApplyRope.backward.0`` -> ("Module.0.rope.ApplyRope", 0, "backward"), or
    None (``Module.....parameters_grad.0`` and other records that are no call)."""
    m = _MODULE_RECORD.match(name) or _RECORD.match(name)
    return None if m is None else (m["api"], int(m["call"]), m["stage"])


def is_module(api: str) -> bool:
    """A module's records (``Module.``, MindSpore's ``Cell.``), not an API's."""
    return api.split(".", 1)[0] in ("Module", "Cell")


def find_dumps(path) -> list[str]:
    """The dump.json files of a dump: PATH itself, or PATH/*/, PATH/*/*/ and PATH/*/*/*/
    (step*/rank*/, pynative/step*/rank*/), sorted."""
    path = os.fspath(path)
    if os.path.isfile(os.path.join(path, "dump.json")):
        return [os.path.join(path, "dump.json")]
    found = []
    for pattern in ("*/dump.json", "*/*/dump.json", "*/*/*/dump.json"):
        found += glob.glob(os.path.join(glob.escape(path), pattern))
    return sorted(set(found))


def is_msprobe_dir(path) -> bool:
    return os.path.isdir(path) and bool(find_dumps(path))


def _number(part: str, prefixes) -> int | None:
    for prefix in prefixes:
        if part.startswith(prefix) and part[len(prefix):].isdigit():
            return int(part[len(prefix):])
    return None


def _proc_ranks(step_dir: str) -> dict[str, int]:
    """{``proc<PID>``: rank} of the proc folders (with a dump.json) in one step folder: in PID
    order, after the highest ``rank<R>`` folder there, from 0 when there is none."""
    ranks, pids = [-1], []
    for name in os.listdir(step_dir):
        m = _RANK_FOLDER.match(name)
        if m and os.path.isfile(os.path.join(step_dir, name, "dump.json")):
            (ranks if m[1] == "rank" else pids).append(int(m[2]))
    return {f"proc{pid}": max(ranks) + 1 + i for i, pid in enumerate(sorted(pids))}


def step_rank(dump_json: str) -> tuple[int | None, int | None]:
    """The step and rank of a dump from its folders, ``.../step<S>/rank<R>/dump.json``; a
    ``proc<PID>`` folder gets the rank ``_proc_ranks`` numbers it with; None where a folder
    does not say."""
    folder = os.path.normpath(os.path.dirname(os.path.abspath(os.fspath(dump_json))))
    parts = folder.split(os.sep)
    rank = _number(parts[-1], ("rank",))
    if rank is None and _number(parts[-1], ("proc",)) is not None:
        rank = _proc_ranks(os.path.dirname(folder)).get(parts[-1])
    step = _number(parts[-2], ("step",)) if len(parts) > 1 else None
    return step, rank


def _encodes(stored: np.dtype, real: np.dtype) -> str:
    """How ``stored`` holds values of ``real``: "same", "bits" (bfloat16 as uint16 or V2),
    "wider" (bfloat16 saved as float32 or float64, as MindSpore saves it) or "" (it cannot)."""
    if real_dtype_of(stored, real) is not None:
        return "bits" if real == bfloat16 and stored != bfloat16 else "same"
    if real == bfloat16 and stored.kind == "f" and stored.itemsize > 2:
        return "wider"
    return ""


class DumpTensor:
    """One tensor entry of a record: ``dump``, ``record``, ``where`` (``output[0]``,
    ``input_kwargs[x]``), the declared ``dtype`` and ``shape``, its ``data_name`` and file
    ``path``."""

    def __init__(self, dump: "Dump", record: str, where: str, entry: dict):
        self.dump, self.record, self.where, self.entry = dump, record, where, entry
        self.dtype_text = entry.get("dtype")
        self.dtype = parse_dtype(self.dtype_text)
        shape = entry.get("shape")
        self.shape = tuple(int(s) for s in shape) if isinstance(shape, list) else None
        name = entry.get("data_name")
        self.data_name = str(name) if name else None
        self.path = None if self.data_name is None else os.path.join(self.dump.data_dir,
                                                                     self.data_name)
        if self.path is not None:
            try:
                inside(self.dump.root, os.path.relpath(self.path, self.dump.root))
            except OutsideError as exc:
                self._fail(f"data_name {self.data_name!r}: refused: {exc}")

    @property
    def label(self) -> str:
        """``step0/rank0 NPU.npu_rotary_mul.0.backward output[0]``: where it is in the dump."""
        return f"{self.dump.label} {self.record} {self.where}"

    def _fail(self, what: str, kind: str = "unreadable"):
        raise DumpError(f"{self.dump.path}: {self.record} {self.where}: {what}", kind)

    def _check(self) -> None:
        if self.dtype is None:
            known = sorted({dtype_name(d) for d in _DTYPES.values()})
            self._fail(f"dtype {self.dtype_text!r} is not a tensor dtype refspec knows "
                       f"(allowed: {', '.join(known)})")
        if self.data_name is None:
            self._fail("no data_name: the tensor was not saved (dump with task = \"tensor\", "
                       "not \"statistics\")", "missing")
        if not os.path.isfile(self.path):
            self._fail(f"{self.path} (its data_name) does not exist", "missing")

    def _check_shape(self, shape) -> None:
        if self.shape is not None and tuple(shape) != self.shape:
            self._fail(f"{self.path} has shape {tuple(shape)} but dump.json says {self.shape}",
                       "shape_mismatch")

    def locate(self):
        """A ``TensorFile`` for a C-order .npy file (read in blocks), else the whole array
        in the declared dtype (``load``). DumpError for anything that cannot be read."""
        self._check()
        if not self.data_name.endswith(".npy"):
            return self.load()
        try:
            shape, fortran, stored, offset = read_npy_header(self.path)
        except TensorFileError as exc:
            self._fail(str(exc))
        self._check_shape(shape)
        if not _encodes(stored, self.dtype):
            self._fail(f"{self.path} holds {stored} values, which cannot encode the "
                       f"{dtype_name(self.dtype)} that dump.json declares", "dtype_mismatch")
        found = TensorFile(self.path, self.dtype, shape, offset, stored)
        have = os.path.getsize(self.path) - offset
        if have < found.nbytes:
            self._fail(f"{self.path}: truncated: {have} bytes of data, expected {found.nbytes}")
        if fortran and len(shape) > 1:
            return self.load()
        return found

    def load(self, exact: bool = True) -> np.ndarray:
        """The whole tensor in its declared dtype. bfloat16 saved as float32 (MindSpore) must
        hold bfloat16 values exactly when ``exact`` (inputs of a golden case); otherwise it is
        rounded to nearest."""
        self._check()
        if self.data_name.endswith(".pt"):
            arr = self._load_pt()
        else:
            try:
                arr = np.load(self.path, allow_pickle=False)
            except Exception as exc:
                self._fail(f"{self.path}: not a readable .npy file ({one_line(exc)})")
        self._check_shape(arr.shape)
        how = _encodes(arr.dtype, self.dtype)
        if not how:
            self._fail(f"{self.path} holds {arr.dtype} values, which cannot encode the "
                       f"{dtype_name(self.dtype)} that dump.json declares", "dtype_mismatch")
        arr = np.ascontiguousarray(arr)
        if how == "bits":
            return bits_to_bfloat16(arr)
        if how == "wider":
            out = arr.astype(bfloat16)
            if exact:
                back = out.astype(arr.dtype)
                same = (back == arr) | (np.isnan(arr) & np.isnan(back))
                if not same.all():
                    bad = int(np.flatnonzero(~same.reshape(-1))[0])
                    self._fail(f"{self.path} holds {arr.dtype} values that are not bfloat16 "
                               f"values (element {bad}: {arr.reshape(-1)[bad]!r}), though "
                               "dump.json declares bfloat16")
            return out
        return arr.astype(self.dtype, copy=False)

    def _load_pt(self) -> np.ndarray:
        try:
            import torch
        except ImportError:
            self._fail(f"{self.path}: .pt tensor files need PyTorch, which is not installed "
                       "(refspec reads them with torch.load(weights_only=True))")
        try:
            t = torch.load(self.path, map_location="cpu", weights_only=True)
        except Exception as exc:
            self._fail(f"{self.path}: {one_line(exc)}")
        if not isinstance(t, torch.Tensor):
            self._fail(f"{self.path}: holds a {type(t).__name__}, not a tensor")
        t = t.detach().contiguous()
        if t.dtype == torch.bfloat16:
            return t.view(torch.int16).numpy().view(np.uint16).view(bfloat16)
        try:
            return t.numpy()
        except TypeError as exc:
            self._fail(f"{self.path}: tensor of {t.dtype}: {one_line(exc)}", "dtype_mismatch")


def folder_names(label: str, rank: int | None) -> tuple[str, str]:
    """(name, description) of a dump folder: ``step0/proc20726`` numbered rank 0 gives
    ("step0/rank0", "step0/proc20726 (rank 0)"); any other folder its label twice."""
    head, _, last = label.rpartition("/")
    if rank is None or not last.startswith("proc"):
        return label, label
    return f"{head}/rank{rank}" if head else f"rank{rank}", f"{label} (rank {rank})"


def _is_tensor(entry) -> bool:
    return isinstance(entry, dict) and "dtype" in entry and "shape" in entry


def _tensors(entry) -> list:
    """The tensor entries of one argument (inside lists and objects too)."""
    if _is_tensor(entry):
        return [entry]
    items = entry.values() if isinstance(entry, dict) else entry if isinstance(entry, list) else ()
    return [t for item in items for t in _tensors(item)]


def _grad_count(entry) -> int:
    """How many gradients msprobe lists for one forward argument of a module: its tensors that
    require grad, inside lists and objects too (msprobe's hook_wrapper.parse_tensor)."""
    return sum(1 for t in _tensors(entry) if t.get("requires_grad") is True)


class Dump:
    """One dump.json: ``path``, ``label`` (its directory relative to the dump root, e.g.
    ``step0/proc20726``), ``step`` and ``rank`` (from step{N} and rank{R}, a proc{PID} folder
    numbered by ``step_rank``; or None), ``name`` (the label with a proc folder named by that
    rank, ``step0/rank0``: what case ids use, the same in a rerun under another PID),
    ``described`` (the label and a proc folder's rank, for messages), ``framework`` and
    ``data`` (the records)."""

    def __init__(self, path, root=None):
        self.path = os.fspath(path)
        self.dir = os.path.dirname(self.path)
        self.data_dir = os.path.join(self.dir, "dump_tensor_data")
        root = self.dir if root is None else os.fspath(root)
        self.root = root
        try:
            inside(root, os.path.relpath(self.path, root))
        except OutsideError as exc:
            raise DumpError(f"{self.path}: refused: {exc}") from None
        rel = os.path.relpath(self.dir, root)
        self.label = "." if rel == os.curdir else rel.replace(os.sep, "/")
        self.step, self.rank = step_rank(self.path)
        self.name, self.described = folder_names(self.label, self.rank)
        try:
            with open(self.path, encoding="utf-8") as fh:
                doc = json.load(fh)
        except (OSError, ValueError) as exc:
            raise DumpError(f"{self.path}: not a readable dump.json ({one_line(exc)})") from None
        data = doc.get("data") if isinstance(doc, dict) else None
        if not isinstance(data, dict):
            raise DumpError(f"{self.path}: not an msprobe dump.json (no \"data\" object)")
        self.framework = str(doc.get("framework", ""))
        self.task = str(doc.get("task", ""))
        self.data = data

    def __repr__(self):
        return f"<Dump {self.label}: {len(self.data)} records>"

    def record(self, name: str) -> dict:
        rec = self.data.get(name)
        if not isinstance(rec, dict):
            raise DumpError(f"{self.path}: no record {name!r}", "missing")
        return rec

    def apis(self) -> dict:
        """{API or module name (``NPU.npu_rotary_mul``, ``Module.0.rope.ApplyRope``): {call
        number: {stage: record name}}} (worked out once; do not modify it)."""
        return self._apis

    @cached_property
    def _apis(self) -> dict:
        out: dict = {}
        for name in self.data:
            parts = split_record(name)
            if parts is not None:
                api, call, stage = parts
                out.setdefault(api, {}).setdefault(call, {})[stage] = name
        return out

    def entries(self, record: str, field: str):
        """The list (or object) ``field`` of a record, positions as a reference counts them:
        a module's backward lists aligned with its forward record (``_placed``)."""
        rec = self.record(record)
        if field not in rec:
            raise DumpError(f"{self.path}: {record} has no {field!r} (it has: "
                            f"{', '.join(rec) or 'nothing'})", "missing")
        parts = split_record(record)
        if parts and parts[2] == "backward" and is_module(parts[0]) \
                and field in ("input", "output"):
            return self._placed(parts[0], parts[1], record, field)
        return rec[field]

    def _placed(self, module: str, call: int, record: str, field: str) -> list:
        """A module's backward ``field`` with one item per forward argument (``output``) or
        output (``input``): PyTorch's msprobe lists gradients only for those that require grad,
        so the forward record's flags place them; None where there is none. Without flags
        (MindSpore's records carry none) the list as written."""
        grads = self.record(record)[field]
        forward = self._apis[module][call].get("forward")
        if forward is None:
            raise DumpError(f"{self.path}: {record}: a module's backward lists only the "
                            "gradients that exist; placing them needs its forward record "
                            f"{module}.forward.{call}, which the dump does not have", "missing")
        ffield = "input_args" if field == "output" else "output"
        values = self.record(forward).get(ffield)
        if not any("requires_grad" in t for t in _tensors(values)):
            return grads
        counts = [_grad_count(v) for v in values] if isinstance(values, list) else []
        if not isinstance(grads, list) or sum(counts) != len(grads):
            n = len(grads) if isinstance(grads, list) else 0
            raise DumpError(f"{self.path}: {record} {field} lists {n} gradients but {forward} "
                            f"{ffield} has {sum(counts)} tensors that require grad: not one call")
        placed, at = [], 0
        for value, n in zip(values, counts):
            placed.append(None if n == 0 else grads[at] if _is_tensor(value) else grads[at:at + n])
            at += n
        return placed

    def _unrecorded(self, record: str, field: str, key) -> str:
        """Why a record holds no tensor at ``field[key]``, in words."""
        api, call, stage = split_record(record) or ("", 0, "")
        if stage == "backward" and is_module(api) and field in ("input", "output"):
            ffield = "input_args" if field == "output" else "output"
            forward = self._apis[api][call]["forward"]
            values = self.record(forward).get(ffield)
            value = values[key] if isinstance(values, list) and key < len(values) else None
            flags = [t.get("requires_grad") for t in _tensors(value)]
            if flags and all(flag is False for flag in flags):
                return (f"not recorded ({forward} {ffield}[{key}] does not require grad, and "
                        "msprobe lists a module's gradients only for those that do)")
        return ("not recorded (null: msprobe recorded no tensor there, e.g. no gradient for an "
                "input that needs none)")

    def item(self, record: str, field: str, key):
        """The JSON item at ``field[key]`` of a record (list position or object key)."""
        items = self.entries(record, field)
        if isinstance(items, dict):
            if str(key) not in items:
                raise DumpError(f"{self.path}: {record} {field} has no {key!r} (it has: "
                                f"{', '.join(items) or 'nothing'})", "missing")
            return items[str(key)]
        if not isinstance(items, list) or not isinstance(key, int) or not 0 <= key < len(items):
            n = len(items) if isinstance(items, list) else 0
            raise DumpError(f"{self.path}: {record} has no {field}[{key}] ({n} entries)", "missing")
        return items[key]

    def tensor(self, record: str, field: str, key) -> DumpTensor:
        """The tensor entry at ``field[key]`` of a record (DumpError if it is not a tensor;
        kind ``not_recorded`` for null, where msprobe recorded nothing)."""
        entry = self.item(record, field, key)
        if entry is None:
            raise DumpError(f"{self.path}: {record} {field}[{key}]: "
                            + self._unrecorded(record, field, key), "not_recorded")
        if not _is_tensor(entry):
            raise DumpError(f"{self.path}: {record} {field}[{key}] is not a tensor "
                            f"({json.dumps(entry)[:80]})", "missing")
        return DumpTensor(self, record, f"{field}[{key}]", entry)

    def by_data_name(self, data_name: str) -> DumpTensor:
        """The tensor entry whose data_name is ``data_name`` (the first, in file order)."""
        found = self._data_names.get(data_name)
        if found is None:
            raise DumpError(f"{self.path}: no tensor with data_name {data_name!r}", "missing")
        return DumpTensor(self, *found)

    @cached_property
    def _data_names(self) -> dict:
        """{data_name: (record, "field[key]", entry)}, each name's first entry in file order."""
        out: dict = {}
        for record, rec in self.data.items():
            if not isinstance(rec, dict):
                continue
            for field, items in rec.items():
                pairs = items.items() if isinstance(items, dict) else (
                    enumerate(items) if isinstance(items, list) else ())
                for key, entry in pairs:
                    if isinstance(entry, dict) and isinstance(entry.get("data_name"), str):
                        out.setdefault(entry["data_name"], (record, f"{field}[{key}]", entry))
        return out


def what_records(dumps) -> str:
    """What records some dumps have, for messages: ``24 records; APIs NPU.npu_rotary_mul, ...;
    modules Module.0.rope.ApplyRope, ...`` (at most 12 names of each)."""
    names = sorted({a for d in dumps for a in d.apis()})
    parts = [f"{sum(len(d.data) for d in dumps)} records"]
    for what, found in (("APIs", [a for a in names if not is_module(a)]),
                        ("modules", [a for a in names if is_module(a)])):
        if found:
            parts.append(f"{what} " + ", ".join(found[:12]) + (" ..." if len(found) > 12 else ""))
    if not names:
        some = [r for d in dumps for r in d.data][:3]
        parts.append("none named <API>.<call>.forward|backward or Module.<name>.forward|"
                     "backward.<call>" + (f", e.g. {', '.join(some)}" if some else ""))
    return "; ".join(parts)


def open_dumps(path) -> list[Dump]:
    """Every dump.json under a dump path, read (DumpError if there is none or one is bad)."""
    path = os.fspath(path)
    if not os.path.isdir(path):
        raise DumpError(f"{path}: not a directory (an msprobe dump is DUMP_PATH/step*/rank*/"
                        "dump.json)", "missing")
    found = find_dumps(path)
    if not found:
        raise DumpError(f"{path}: no dump.json in it, nor in its step*/rank*/ folders", "missing")
    return [Dump(p, path) for p in found]
