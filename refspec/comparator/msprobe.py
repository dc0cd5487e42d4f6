"""msprobe dump directories as a source of actual outputs (spec/dumps.md).

Layout: ``dump_path/step{N}/rank{R}/dump.json`` and ``dump_tensor_data/`` with one file per
tensor (``.npy``; ``.pt`` only when PyTorch is installed, loaded with ``weights_only=True``).
dump.json maps each API call (``"NPU.npu_rotary_mul.0.backward"``) to ``input_args``,
``input_kwargs``, ``input`` and ``output`` lists of tensor records with ``dtype``, ``shape`` and
``data_name``. The JSON's dtype is authoritative: a ``.npy`` may hold bfloat16 as uint16 bits,
2-byte voids or float32 values (MindSpore) and is decoded to it. A mapping file
(:mod:`refspec.compare.mapping`) says which tensor is which golden output.
"""

from __future__ import annotations

import glob
import json
import os

import numpy as np

from ..spec.dtypes import bfloat16, dtype_name
from .actuals import ActualSource, ArrayActual, Problem, RawFileActual, decode_dtype, _one_line

__all__ = ["MsprobeSource", "find_dumps", "is_msprobe_dir", "parse_dtype"]

_DTYPES = {"bfloat16": bfloat16, "float16": np.dtype(np.float16), "half": np.dtype(np.float16),
           "float32": np.dtype(np.float32), "float": np.dtype(np.float32),
           "float64": np.dtype(np.float64), "double": np.dtype(np.float64)}


def parse_dtype(text) -> np.dtype | None:
    """``torch.bfloat16``, ``BFloat16``, ``mindspore.float16``, ``Float32`` -> a dtype."""
    if not isinstance(text, str):
        return None
    name = text.rsplit(".", 1)[-1].lower()
    return _DTYPES.get(name)


def find_dumps(path: str) -> list[str]:
    """The dump.json files under an msprobe dump directory (sorted)."""
    if os.path.isfile(os.path.join(path, "dump.json")):
        return [os.path.join(path, "dump.json")]
    found = []
    for pattern in ("*/dump.json", "*/*/dump.json"):
        found += glob.glob(os.path.join(glob.escape(path), pattern))
    return sorted(set(found))


def is_msprobe_dir(path: str) -> bool:
    return os.path.isdir(path) and bool(find_dumps(path))


def _label(dump_json: str, root: str) -> str:
    return os.path.relpath(os.path.dirname(dump_json), root)


class MsprobeSource(ActualSource):
    kind = "msprobe"

    def __init__(self, path: str, mapping):
        super().__init__(path)
        self.mapping = mapping
        self.dumps = find_dumps(path)
        self._cache: dict[str, dict | str] = {}

    def _choose_dump(self, entry: dict):
        step = entry.get("step", self.mapping.step)
        rank = entry.get("rank", self.mapping.rank)
        cands = self.dumps
        if step is not None:
            cands = [d for d in cands if f"{os.sep}step{step}{os.sep}" in d
                     or os.path.basename(os.path.dirname(os.path.dirname(d))) == f"step{step}"]
        if rank is not None:
            cands = [d for d in cands if os.path.basename(os.path.dirname(d)) in (f"rank{rank}", f"proc{rank}")]
        if len(cands) == 1:
            return cands[0], None
        labels = ", ".join(_label(d, self.path) for d in self.dumps) or "none"
        if not cands:
            return None, (f"no dump for step={step} rank={rank} under {self.path} (found: {labels})")
        return None, (f"several dumps under {self.path} ({labels}); say which with step = N and "
                      "rank = R in the mapping file")

    def _data(self, dump_json: str):
        if dump_json not in self._cache:
            try:
                with open(dump_json, encoding="utf-8") as fh:
                    doc = json.load(fh)
                data = doc.get("data") if isinstance(doc, dict) else None
                if not isinstance(data, dict):
                    raise ValueError("no 'data' object")
                self._cache[dump_json] = data
            except Exception as exc:
                self._cache[dump_json] = f"{dump_json}: not a readable dump.json ({_one_line(exc)})"
        return self._cache[dump_json]

    @staticmethod
    def _records(data: dict):
        for api, calls in data.items():
            if not isinstance(calls, dict):
                continue
            for field, val in calls.items():
                items = val.values() if isinstance(val, dict) else (val if isinstance(val, list) else [])
                for rec in items:
                    if isinstance(rec, dict) and "data_name" in rec:
                        yield api, field, rec

    def _record(self, data: dict, entry: dict):
        if "data_name" in entry:
            want = str(entry["data_name"])
            for api, field, rec in self._records(data):
                if rec.get("data_name") == want:
                    return rec, None
            return None, f"no tensor with data_name {want!r} in dump.json"
        api, index = str(entry["api"]), int(entry.get("index", 0))
        field = str(entry.get("field", "output"))
        call = data.get(api)
        if not isinstance(call, dict):
            return None, f"no API call {api!r} in dump.json"
        lst = call.get(field)
        if isinstance(lst, dict):
            lst = list(lst.values())
        if not isinstance(lst, list) or not (0 <= index < len(lst)):
            n = len(lst) if isinstance(lst, list) else 0
            return None, f"{api} has no {field}[{index}] ({n} entries)"
        rec = lst[index]
        if not isinstance(rec, dict) or "data_name" not in rec:
            return None, f"{api} {field}[{index}] is not a dumped tensor"
        return rec, None

    def lookup(self, case_id, op, output, dtype, shape):
        entry = self.mapping.entry(case_id, output) if self.mapping else None
        if entry is None or "key" in entry:
            return Problem("missing", "the mapping file names no dump tensor for this output")
        dump_json, why = self._choose_dump(entry)
        if why:
            return Problem("missing", why)
        data = self._data(dump_json)
        if isinstance(data, str):
            return Problem("unreadable", data, dump_json)
        rec, why = self._record(data, entry)
        if why:
            return Problem("missing", f"{dump_json}: {why}")
        name = str(rec["data_name"])
        path = os.path.join(os.path.dirname(dump_json), "dump_tensor_data", name)
        src = path
        real = parse_dtype(rec.get("dtype"))
        if real is None:
            return Problem("unreadable", f"{dump_json}: {name}: dtype {rec.get('dtype')!r} is not "
                           "a floating dtype refspec knows", src)
        if real != dtype:
            return Problem("dtype_mismatch", f"{name}: dump.json says {dtype_name(real)} but the "
                           f"golden output is {dtype_name(dtype)}", src)
        jshape = rec.get("shape")
        if isinstance(jshape, list) and tuple(jshape) != tuple(shape):
            return Problem("shape_mismatch", f"{name}: dump.json says shape {tuple(jshape)} but the "
                           f"golden output has shape {tuple(shape)}", src)
        if not os.path.exists(path):
            return Problem("missing", f"{path} (named in dump.json) does not exist", src)
        if name.endswith(".pt"):
            return self._load_pt(path, real, shape, src)
        return self._load_npy(path, real, shape, src)

    @staticmethod
    def _load_npy(path, real, shape, src):
        try:
            with open(path, "rb") as fh:
                version = np.lib.format.read_magic(fh)
                read = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                        else np.lib.format.read_array_header_2_0)
                fshape, fortran, stored = read(fh)
                offset = fh.tell()
        except Exception as exc:
            return Problem("unreadable", f"{path}: not a readable .npy file ({_one_line(exc)})", src)
        if stored.hasobject:
            return Problem("unreadable", f"{path}: holds Python objects (pickles are never loaded)", src)
        wider = stored.kind == "f" and stored.itemsize > real.itemsize   # e.g. bf16 saved as float32
        if decode_dtype(stored, real) and not wider:
            return Problem("unreadable", f"{path}: holds {stored} values, which cannot encode the "
                           f"{dtype_name(real)} that dump.json declares", src)
        if tuple(fshape) != tuple(shape):
            return Problem("shape_mismatch", f"{path}: shape {tuple(fshape)} but the golden output "
                           f"has shape {tuple(shape)}", src)
        if fortran and len(fshape) > 1:
            arr = np.ascontiguousarray(np.load(path, allow_pickle=False))
            return ArrayActual(src, arr.astype(real) if wider else arr, real)
        return RawFileActual(src, path, offset, stored, shape, real)

    @staticmethod
    def _load_pt(path, real, shape, src):
        try:
            import torch
        except ImportError:
            return Problem("unreadable", f"{path}: .pt dumps need PyTorch, which is not installed", src)
        try:
            t = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as exc:
            return Problem("unreadable", f"{path}: {_one_line(exc)}", src)
        if not isinstance(t, torch.Tensor):
            return Problem("unreadable", f"{path}: holds a {type(t).__name__}, not a tensor", src)
        t = t.detach().contiguous()
        if t.dtype == torch.bfloat16:
            arr = t.view(torch.int16).numpy().view(np.uint16).view(bfloat16)
        else:
            arr = t.numpy()
        if arr.dtype != real:
            return Problem("unreadable", f"{path}: tensor of {t.dtype} but dump.json declares "
                           f"{dtype_name(real)}", src)
        if tuple(arr.shape) != tuple(shape):
            return Problem("shape_mismatch", f"{path}: shape {tuple(arr.shape)} but the golden "
                           f"output has shape {tuple(shape)}", src)
        return ArrayActual(src, arr, real)
