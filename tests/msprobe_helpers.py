"""msprobe-format dumps written by the tests, in the layout msprobe itself writes (read from
mindstudio-probe's source: core/dump/service.py for the folders, json_writer.py for dump.json,
data_processor/base.py for the records and file names, pytorch_processor.py and
mindspore_processor.py for the tensor files):

    DUMP/step{N}/rank{R}/dump.json, DUMP/step{N}/rank{R}/dump_tensor_data/<data_name>

A forward record ``<Prefix>.<api>.<call>.forward`` has ``input_args``, ``input_kwargs`` and
``output``; the backward record ``input`` (gradients of the outputs) and ``output`` (gradients
of the inputs, null where an input has none). Tensor files are named
``<record>.<input|kwargs|output>.<position or name>.<pt|npy>``. PyTorch saves ``torch.save``
files (.pt, bfloat16 kept) and writes dtypes as ``torch.bfloat16``; MindSpore saves ``np.save``
files (.npy) with bfloat16 converted to float32 and writes dtypes as ``BFloat16``.
"""

from __future__ import annotations

import json
import os

import ml_dtypes
import numpy as np

BF16 = np.dtype(ml_dtypes.bfloat16)
_PT_NAMES = {"bfloat16": "torch.bfloat16", "float16": "torch.float16", "float32": "torch.float32",
             "float64": "torch.float64", "int64": "torch.int64", "int32": "torch.int32"}
_MS_NAMES = {"bfloat16": "BFloat16", "float16": "Float16", "float32": "Float32",
             "float64": "Float64", "int64": "Int64", "int32": "Int32"}


def _dtype_name(a) -> str:
    return "bfloat16" if a.dtype == BF16 else a.dtype.name


class DumpWriter:
    """Writes one step/rank folder of a dump. ``framework``: "pytorch" (.pt files; needs
    torch) or "mindspore" (.npy files, bfloat16 as float32)."""

    def __init__(self, root, framework="mindspore", step=0, rank=0):
        self.framework = framework
        self.dir = os.path.join(os.fspath(root), f"step{step}", f"rank{rank}")
        self.data_dir = os.path.join(self.dir, "dump_tensor_data")
        os.makedirs(self.data_dir, exist_ok=True)
        self.data = {}

    def _entry(self, value, record: str, category: str, suffix):
        if value is None:
            return None
        if isinstance(value, (bool, int, float, str)):       # msprobe: {"type": "str", ...}
            return {"type": type(value).__name__, "value": value}
        if isinstance(value, list):                  # msprobe records a list item by item
            return [self._entry(v, record, category, f"{suffix}.{i}") for i, v in enumerate(value)]
        a = np.asarray(value)
        ext = "pt" if self.framework == "pytorch" else "npy"
        data_name = f"{record}.{category}.{suffix}.{ext}"
        path = os.path.join(self.data_dir, data_name)
        if self.framework == "pytorch":
            import torch
            if a.dtype == BF16:
                t = torch.from_numpy(a.view(np.int16).copy()).view(torch.bfloat16)
            else:
                t = torch.from_numpy(np.ascontiguousarray(a))
            torch.save(t, path)
            names, kind = _PT_NAMES, "torch.Tensor"
        else:
            np.save(path, a.astype(np.float32) if a.dtype == BF16 else a)
            names, kind = _MS_NAMES, "mindspore.Tensor"
        wide = a.astype(np.float64)
        return {"type": kind, "dtype": names[_dtype_name(a)], "shape": list(a.shape),
                "Max": float(wide.max()) if a.size else None,
                "Min": float(wide.min()) if a.size else None,
                "Mean": float(wide.mean()) if a.size else None,
                "Norm": float(np.sqrt((wide ** 2).sum())), "requires_grad": True,
                "data_name": data_name}

    def forward(self, api: str, call: int, args, kwargs, outputs, prefix="NPU") -> str:
        record = f"{prefix}.{api}.{call}.forward"
        self.data[record] = {
            "input_args": [self._entry(v, record, "input", i) for i, v in enumerate(args)],
            "input_kwargs": {k: self._entry(v, record, "kwargs", k) for k, v in kwargs.items()},
            "output": [self._entry(v, record, "output", i) for i, v in enumerate(outputs)]}
        return record

    def backward(self, api: str, call: int, grad_outputs, grad_inputs, prefix="NPU") -> str:
        record = f"{prefix}.{api}.{call}.backward"
        self.data[record] = {
            "input": [self._entry(v, record, "input", i) for i, v in enumerate(grad_outputs)],
            "output": [self._entry(v, record, "output", i) for i, v in enumerate(grad_inputs)]}
        return record

    def close(self) -> str:
        doc = {"task": "tensor", "level": "L1", "framework": self.framework,
               "dump_data_dir": self.data_dir, "data": self.data}
        path = os.path.join(self.dir, "dump.json")
        with open(path, "w", encoding="utf-8") as fh:
            json.dump(doc, fh, indent=1)
        return path


#: the argument order of the NormRopeConcat API the tests dump (a mapping file names any order)
NRC_ARGS = ("query", "key", "value", "encoder_query", "encoder_key", "encoder_value",
            "norm_query_weight", "norm_query_bias", "norm_key_weight", "norm_key_bias",
            "norm_added_query_weight", "norm_added_query_bias", "norm_added_key_weight",
            "norm_added_key_bias", "rope_sin", "rope_cos")
#: its outputs, in order (the forward of NormRopeConcat with is_training)
NRC_OUTPUTS = ("query_output", "key_output", "value_output", "norm_query_mean", "norm_query_rstd",
               "norm_key_mean", "norm_key_rstd", "norm_added_query_mean",
               "norm_added_query_rstd", "norm_added_key_mean", "norm_added_key_rstd")
#: the gradients of its inputs, in argument order (the backward record's output)
NRC_GRADS = tuple(f"grad_{n}" for n in NRC_ARGS[:14])

ROPE_MAP = """
[[api]]
name = "npu_rotary_position_embedding"
operator = "rope_grad"
soc = "{soc}"
inputs = {{ dy = "backward.input.0", x = "forward.input.0", cos = "forward.input.1", sin = "forward.input.2" }}
attributes = {{ mode = "forward.input.3" }}
outputs = {{ dx = "backward.output.0", dcos = "backward.output.1", dsin = "backward.output.2" }}

[[api]]
name = "npu_rotary_position_embedding"
operator = "rope"
soc = "{soc}"
inputs = {{ x = "forward.input.0", cos = "forward.input.1", sin = "forward.input.2" }}
attributes = {{ mode = "forward.input.3" }}
outputs = {{ y = "forward.output.0" }}
"""


def nrc_map(soc="A2") -> str:
    """The mapping file of the tests' NormRopeConcat API: its backward and its forward."""
    fwd_inputs = ", ".join(f'{n} = "forward.input.{i}"' for i, n in enumerate(NRC_ARGS))
    attrs = ", ".join(f'{a} = "forward.kwargs.{a}"'
                      for a in ("norm_type", "norm_added_type", "rope_type", "concat_order"))
    bwd = {"grad_query_output": "backward.input.0", "grad_key_output": "backward.input.1",
           "grad_value_output": "backward.input.2"}
    bwd.update({n: f"forward.input.{NRC_ARGS.index(n)}"
                for n in ("query", "key", "encoder_query", "encoder_key", "norm_query_weight",
                          "norm_key_weight", "norm_added_query_weight", "norm_added_key_weight",
                          "rope_sin", "rope_cos")})
    bwd.update({n: f"forward.output.{NRC_OUTPUTS.index(n)}" for n in NRC_OUTPUTS[3:]})
    bwd_inputs = ", ".join(f'{k} = "{v}"' for k, v in bwd.items())
    grads = ", ".join(f'{g} = "backward.output.{i}"' for i, g in enumerate(NRC_GRADS))
    outs = ", ".join(f'{o} = "forward.output.{i}"' for i, o in enumerate(NRC_OUTPUTS))
    return f"""
[[api]]
name = "npu_norm_rope_concat"
operator = "nrc_grad"
soc = "{soc}"
inputs = {{ {bwd_inputs} }}
attributes = {{ {attrs} }}
outputs = {{ {grads} }}

[[api]]
name = "npu_norm_rope_concat"
operator = "nrc"
soc = "{soc}"
inputs = {{ {fwd_inputs} }}
attributes = {{ {attrs}, is_training = true }}
outputs = {{ {outs} }}
"""


def rope_calls(w: DumpWriter, rng, calls=2, dtype=BF16, bug=None, shape=(2, 16, 4, 32), mode=0):
    """Forward and backward records of ``calls`` calls of npu_rotary_position_embedding(x, cos,
    sin, mode) in BSND with 1S1D tables; the outputs from the tests' float32 implementation
    (``bug``: one of implementations.ROPE_BUGS). Returns {call: inputs}."""
    import implementations as impl
    B, S, N, D = shape
    made = {}
    for call in range(calls):
        x = rng.standard_normal(shape).astype(dtype)
        angle = rng.uniform(-3, 3, (1, S, 1, D // 2 if mode == 1 else D))
        if mode == 1:
            angle = np.repeat(angle, 2, axis=-1)
        cos, sin = np.cos(angle).astype(dtype), np.sin(angle).astype(dtype)
        dy = rng.standard_normal(shape).astype(dtype)
        y = impl.rope_forward(x, cos, sin, mode)["y"]
        g = impl.rope_grad(dy, cos, sin, x, mode, bug=bug)
        w.forward("npu_rotary_position_embedding", call, [x, cos, sin, mode], {}, [y])
        w.backward("npu_rotary_position_embedding", call, [dy], [g["dx"], g["dcos"], g["dsin"], None])
        made[call] = dict(x=x, cos=cos, sin=sin, dy=dy, mode=mode)
    return made


def nrc_call(w: DumpWriter, rng, dtype=np.float16, attrs=None, bug=None, call=0,
             sizes=(1, 2, 16, 5, 6, 3, 2, 7)):
    """Forward and backward records of one NormRopeConcat call with is_training (statistics
    from the tests' float32 forward); the gradients from the tests' float32 backward
    (``bug``: one of implementations.NRC_BUGS). Returns the inputs by spec name."""
    import implementations as impl
    attrs = attrs or dict(norm_type=2, norm_added_type=1, rope_type=2, concat_order=0)
    B, N, D, Sq, Sk, Seq, Sek, Sr = sizes

    def r(*s):
        return rng.standard_normal(s).astype(dtype)

    t = dict(query=r(B, Sq, N, D), key=r(B, Sk, N, D), value=r(B, Sk, N, D),
             encoder_query=r(B, Seq, N, D), encoder_key=r(B, Sek, N, D),
             encoder_value=r(B, Sek, N, D))
    t.update({n: r(D) for n in NRC_ARGS[6:14]})
    angle = rng.uniform(-3, 3, (Sr, D))
    t["rope_sin"], t["rope_cos"] = np.sin(angle).astype(dtype), np.cos(angle).astype(dtype)
    fo = impl.nrc_forward(t, dict(attrs, is_training=True), dtype)
    w.forward("npu_norm_rope_concat", call, [t[n] for n in NRC_ARGS],
              dict(attrs, eps=1e-5, is_training=True), [fo.get(n) for n in NRC_OUTPUTS])
    grads = dict(grad_query_output=r(B, N, Sq + Seq, D), grad_key_output=r(B, N, Sk + Sek, D),
                 grad_value_output=r(B, N, Sk + Sek, D))
    bwd = {k: t[k] for k in ("query", "key", "encoder_query", "encoder_key", "rope_sin",
                             "rope_cos", *NRC_ARGS[6:14:2])}
    bwd.update({k: fo[k] for k in NRC_OUTPUTS[3:] if k in fo})
    bwd.update(grads)
    go = impl.nrc_backward(bwd, attrs, dtype, bug=bug)
    w.backward("npu_norm_rope_concat", call, list(grads.values()) + [None] * 8,
               [go.get(n) for n in NRC_GRADS])
    return {**t, **grads, **{k: fo[k] for k in NRC_OUTPUTS[3:] if k in fo}}
