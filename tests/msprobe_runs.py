"""Dumps written by msprobe itself (mindstudio-probe 26.2.0's PyTorch dumper, on the CPU).

``run_msprobe(out_dir, **config)`` runs a two-step bfloat16 training of a tiny model in a
child process under ``msprobe.pytorch.PrecisionDebugger`` with ``task = "tensor"`` and returns
the dump path (``out_dir/dump``). The model's RoPE is a fused ``npu_rotary_mul(x, r1, r2,
rotary_mode=...)`` stand-in registered with ``PrecisionDebugger.register_custom_api(...,
"NPU")``, so its records are named ``NPU.npu_rotary_mul.N.forward``/``.backward`` as in an NPU
run; it is one autograd node (a ``torch.autograd.Function``), as torch_npu's kernel is, so
msprobe records its backward's gradients ``[dx, dcos, dsin]``, ``null`` where an input needs
none. It is called by a Hugging Face-style module ``ApplyRope`` (``model.rope``), which levels
L0 and mix record as ``Module[.0].rope.ApplyRope.forward.N``/``.backward.N``. The formula here
is a torch oracle of its own (float32 arithmetic, one rounding to the input dtype), written
from docs/rope.md, not refspec's code.

config: ``level`` ("L1", "L0", "mix"), ``distributed`` (a single-process gloo group: folders
``rank0``; without it ``proc{PID}``), ``tables_grad`` (cos and sin require grad), ``mode``
("half", "interleave"; passed as ``rotary_mode=``), ``shape`` (B, S, N, D of x, BSND),
``steps``, ``seed``. At level L0 the model is given to msprobe as a list (record names
``Module.0.rope.ApplyRope...``), at mix as itself (``Module.rope.ApplyRope...``).

What msprobe writes (26.2.0, read from its source and checked by tests/inputs/
test_msprobe_real.py): ``dump/step{N}/rank{R}/`` or ``dump/step{N}/proc{PID}/`` with
dump.json, construct.json, stack.json and dump_tensor_data/*.pt; an API's backward ``output``
is aligned with its forward inputs (``null`` where an input gets no gradient); a module's
backward ``output`` lists only the gradients of its positional inputs that require grad (the
forward record's ``requires_grad`` flags say which), and its ``input`` only those of outputs
that require grad.

Run as a script (``python msprobe_runs.py CONFIG.json``) it performs one run; only that part
imports torch and msprobe.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

DEFAULTS = {"level": "L1", "distributed": False, "tables_grad": False, "mode": "half",
            "shape": [2, 8, 2, 16], "steps": 2, "seed": 0}


def run_msprobe(out_dir, **config) -> Path:
    """One msprobe run in a child process; returns its dump path (``out_dir/dump``)."""
    unknown = set(config) - set(DEFAULTS)
    if unknown:
        raise TypeError(f"unknown config {sorted(unknown)}; known: {sorted(DEFAULTS)}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    cfg = {**DEFAULTS, **config, "dump_path": str(out / "dump")}
    (out / "run.json").write_text(json.dumps(cfg))
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    with open(out / "run.log", "w") as log:
        rc = subprocess.call([sys.executable, __file__, str(out / "run.json")], cwd=out,
                             stdout=log, stderr=subprocess.STDOUT, env=env)
    if rc:
        tail = (out / "run.log").read_text()[-3000:]
        raise RuntimeError(f"msprobe run {cfg} failed with exit code {rc}:\n{tail}")
    return out / "dump"


# --- the child process ---------------------------------------------------------------------------

def _rotate(t, mode):
    """half: (x1, x2) -> (-x2, x1); interleave: each pair (a, b) -> (-b, a)."""
    import torch
    if mode == "half":
        a, b = t.chunk(2, dim=-1)
        return torch.cat((-b, a), dim=-1)
    pairs = t.unflatten(-1, (-1, 2))
    return torch.stack((-pairs[..., 1], pairs[..., 0]), dim=-1).flatten(-2)


def _rotate_t(g, mode):
    """The transpose of ``_rotate``: half (g1, g2) -> (g2, -g1); interleave (a, b) -> (b, -a)."""
    import torch
    if mode == "half":
        a, b = g.chunk(2, dim=-1)
        return torch.cat((b, -a), dim=-1)
    pairs = g.unflatten(-1, (-1, 2))
    return torch.stack((pairs[..., 1], -pairs[..., 0]), dim=-1).flatten(-2)


def _stand_in():
    """A module-like namespace with ``npu_rotary_mul`` (one autograd node, float32 inside)."""
    import types
    import torch

    class RotaryMul(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, cos, sin, mode):
            ctx.save_for_backward(x, cos, sin)
            ctx.mode = mode
            xf, cf, sf = x.float(), cos.float(), sin.float()
            return (xf * cf + _rotate(xf, mode) * sf).to(x.dtype)

        @staticmethod
        def backward(ctx, dy):
            x, cos, sin = ctx.saved_tensors
            g, xf = dy.float(), x.float()
            need = ctx.needs_input_grad
            dx = g * cos.float() + _rotate_t(g * sin.float(), ctx.mode) if need[0] else None
            dcos = (g * xf).sum_to_size(cos.shape) if need[1] else None
            dsin = (g * _rotate(xf, ctx.mode)).sum_to_size(sin.shape) if need[2] else None
            return (None if dx is None else dx.to(x.dtype),
                    None if dcos is None else dcos.to(cos.dtype),
                    None if dsin is None else dsin.to(sin.dtype), None)

    npu = types.ModuleType("npu_stand_in")

    def npu_rotary_mul(x, r1, r2, rotary_mode="half"):
        return RotaryMul.apply(x, r1, r2, rotary_mode)

    npu.npu_rotary_mul = npu_rotary_mul
    return npu


def _model(npu, cfg):
    import torch

    class ApplyRope(torch.nn.Module):
        """The RoPE of an attention block as one module (Hugging Face's apply_rotary_pos_emb)."""

        def forward(self, x, cos, sin):
            return npu.npu_rotary_mul(x, cos, sin, rotary_mode=cfg["mode"])

    class TinyModel(torch.nn.Module):
        def __init__(self, d):
            super().__init__()
            self.proj = torch.nn.Linear(d, d, dtype=torch.bfloat16)
            self.rope = ApplyRope()

        def forward(self, x, cos, sin):
            return self.rope(self.proj(x), cos, sin)

    return TinyModel(cfg["shape"][-1])


def _tables(cfg):
    """cos and sin of shape (1, S, 1, D) in bfloat16, laid out for the mode."""
    import torch
    _, S, _, D = cfg["shape"]
    freq = 1.0 / (10000 ** (torch.arange(0, D, 2, dtype=torch.float32) / D))
    angle = torch.arange(S, dtype=torch.float32)[:, None] * freq[None, :]
    angle = torch.cat((angle, angle), -1) if cfg["mode"] == "half" else \
        angle.repeat_interleave(2, -1)
    angle = angle[None, :, None, :]
    return [t.to(torch.bfloat16).requires_grad_(cfg["tables_grad"])
            for t in (angle.cos(), angle.sin())]


def _train(cfg) -> None:
    import torch
    from msprobe.pytorch import PrecisionDebugger
    if cfg["distributed"]:
        import torch.distributed as dist
        dist.init_process_group("gloo", init_method=f"file://{os.path.abspath('store')}",
                                rank=0, world_size=1)
    config = {"task": "tensor", "dump_path": cfg["dump_path"], "rank": [], "step": [],
              "level": cfg["level"], "tensor": {"scope": [], "list": [], "data_mode": ["all"]}}
    with open("config.json", "w") as fh:
        json.dump(config, fh)
    debugger = PrecisionDebugger(config_path=os.path.abspath("config.json"))
    npu = _stand_in()
    PrecisionDebugger.register_custom_api(npu, "npu_rotary_mul", "NPU")
    torch.manual_seed(cfg["seed"])
    model = _model(npu, cfg)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for _ in range(cfg["steps"]):
        debugger.start(model=[model] if cfg["level"] == "L0" else model)
        x = torch.randn(*cfg["shape"], dtype=torch.bfloat16)
        cos, sin = _tables(cfg)
        y = model(x, cos, sin)
        y.backward(torch.randn(y.shape, dtype=torch.bfloat16))
        opt.step()
        opt.zero_grad()
        debugger.stop()
        debugger.step()
    if cfg["distributed"]:
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    with open(sys.argv[1]) as fh:
        _train(json.load(fh))
