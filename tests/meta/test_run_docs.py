"""docs/run.md's torch_npu module works as written: run here against a stand-in ``torch_npu``
whose ``npu_rotary_mul`` computes x * cos + rotate(x) * sin in float32 (the documented formula of
that API), with its backward from autograd, as ``--autograd`` uses the real one on an NPU."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from repo_paths import DOCS

pytest.importorskip("torch")

STAND_IN = '''
import torch


def npu_rotary_mul(x, r1, r2, rotary_mode="half"):
    x32, c, s = x.float(), r1.float(), r2.float()
    if rotary_mode == "half":
        x1, x2 = x32.chunk(2, dim=-1)
        rot = torch.cat((-x2, x1), dim=-1)
    else:
        rot = torch.stack((-x32[..., 1::2], x32[..., 0::2]), dim=-1).flatten(-2)
    return (x32 * c + rot * s).to(x.dtype)
'''


def test_the_torch_npu_module_of_the_docs_runs(tmp_path):
    text = (DOCS / "run.md").read_text()
    module = re.search(r"```python\n(# my_npu_rope\.py\n.*?)```", text, flags=re.S).group(1)
    (tmp_path / "my_npu_rope.py").write_text(module)
    (tmp_path / "torch_npu.py").write_text(STAND_IN)
    path = filter(None, (str(tmp_path), os.environ.get("PYTHONPATH")))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(path)}

    def refspec(*args):
        return subprocess.run([sys.executable, "-m", "refspec", *args], capture_output=True,
                              text=True, cwd=tmp_path, env=env, timeout=600)
    made = refspec("generate", "--op", "rope_grad", "--soc", "A2", "-o", "rope-a2.h5")
    assert made.returncode == 0, made.stderr
    res = refspec("run", "rope-a2.h5", "--impl", "my_npu_rope.py", "--framework", "torch",
                  "--autograd")
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr
    assert res.stdout.strip().splitlines()[-1].startswith("PASS: ")


APPLY_STAND_IN = '''
import torch


def npu_apply_rotary_pos_emb(query, key, cos, sin, layout="BSND"):
    """In place, as the NPU operator: q = q*cos + rotate_half(q)*sin, likewise k (float32)."""
    for t in (query, key):
        x, c, s = t.float(), cos.float(), sin.float()
        x1, x2 = x.chunk(2, dim=-1)
        t.copy_((x * c + torch.cat((-x2, x1), dim=-1) * s).to(t.dtype))
    return query, key
'''


def test_the_apply_rotary_pos_emb_module_of_the_docs_runs(tmp_path):
    text = (DOCS / "run.md").read_text()
    module = re.search(r"```python\n(# my_npu_apply_rope\.py\n.*?)```", text, flags=re.S).group(1)
    (tmp_path / "my_npu_apply_rope.py").write_text(module)
    (tmp_path / "torch_npu.py").write_text(APPLY_STAND_IN)
    path = filter(None, (str(tmp_path), os.environ.get("PYTHONPATH")))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(path)}

    def refspec(*args):
        return subprocess.run([sys.executable, "-m", "refspec", *args], capture_output=True,
                              text=True, cwd=tmp_path, env=env, timeout=600)
    made = refspec("generate", "--op", "apply_rope", "--soc", "A2", "-o", "apply-a2.h5")
    assert made.returncode == 0, made.stderr
    res = refspec("run", "apply-a2.h5", "--impl", "my_npu_apply_rope.py", "--framework", "torch")
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr
    assert res.stdout.strip().splitlines()[-1].startswith("PASS: ")
