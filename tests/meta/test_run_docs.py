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

pytestmark = pytest.mark.slow      # each module runs in its own torch process: seconds per test

pytest.importorskip("torch")


def runner(folder):
    """``refspec(*args)``: the command line run in ``folder``, whose modules (the docs' module,
    the stand-in torch_npu) come first on the path."""
    path = filter(None, (str(folder), os.environ.get("PYTHONPATH")))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(path)}

    def refspec(*args):
        return subprocess.run([sys.executable, "-m", "refspec", *args], capture_output=True,
                              text=True, cwd=folder, env=env, timeout=600)
    return refspec

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
    refspec = runner(tmp_path)
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
    refspec = runner(tmp_path)
    made = refspec("generate", "--op", "apply_rope", "--soc", "A2", "-o", "apply-a2.h5")
    assert made.returncode == 0, made.stderr
    res = refspec("run", "apply-a2.h5", "--impl", "my_npu_apply_rope.py", "--framework", "torch")
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr
    assert res.stdout.strip().splitlines()[-1].startswith("PASS: ")


MROPE_STAND_IN = '''
import ml_dtypes
import numpy as np
import torch

from refspec.spec.rope_cache_checks import check_rope_cache_args


def _like(t):
    """A NumPy array of the tensor's shape and dtype, for the front end's checks."""
    dtype = ml_dtypes.bfloat16 if t.dtype == torch.bfloat16 else torch.empty((), dtype=t.dtype).numpy().dtype
    return np.broadcast_to(np.zeros((), dtype), tuple(t.shape))


def npu_mrope(positions, query, key, cos_sin_cache, head_size, mrope_section=(0, 0, 0),
              rotary_mode="half"):
    """As the NPU operator: the A2 front end's checks (a RuntimeError carrying the aclnn code),
    sections (0, 0, 0) as rope mode, float32 arithmetic."""
    rope_mode = mrope_section[0] <= 0
    try:
        check_rope_cache_args("npu_mrope", *map(_like, (positions, query, key, cos_sin_cache)),
                              head_size, None if rope_mode else tuple(mrope_section),
                              rotary_mode == "half", "A2")
    except ValueError as exc:
        raise RuntimeError(str(exc)) from None
    cos, sin = cos_sin_cache[positions].float().chunk(2, dim=-1)
    if not rope_mode:
        cos, sin = (torch.cat([m[i] for i, m in enumerate(t.split(mrope_section, dim=-1))], -1)
                    for t in (cos, sin))
    c, s = cos[:, None, :], sin[:, None, :]
    outs = []
    for x in (query, key):
        h = x.view(x.shape[0], -1, head_size).float()
        r = h[..., :2 * c.shape[-1]]
        if rotary_mode == "half":
            x1, x2 = r.chunk(2, dim=-1)
            rot = torch.cat((x1 * c - x2 * s, x2 * c + x1 * s), dim=-1)
        else:
            x1, x2 = r[..., 0::2], r[..., 1::2]
            rot = torch.stack((x1 * c - x2 * s, x2 * c + x1 * s), dim=-1).flatten(-2)
        outs.append(torch.cat((rot, h[..., rot.shape[-1]:]), dim=-1).to(x.dtype).view(x.shape))
    return tuple(outs)
'''


def test_the_npu_mrope_module_of_the_docs_runs(tmp_path):
    text = (DOCS / "run.md").read_text()
    module = re.search(r"```python\n(# my_npu_mrope\.py\n.*?)```", text, flags=re.S).group(1)
    (tmp_path / "my_npu_mrope.py").write_text(module)
    (tmp_path / "torch_npu.py").write_text(MROPE_STAND_IN)
    refspec = runner(tmp_path)
    made = refspec("generate", "--op", "rope_cache", "--soc", "A2", "-o", "cache-a2.h5")
    assert made.returncode == 0, made.stderr
    res = refspec("run", "cache-a2.h5", "--impl", "my_npu_mrope.py", "--framework", "torch")
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr
    last = res.stdout.strip().splitlines()[-1]
    assert last.startswith("PASS: ") and " 0 failed" in last


KV_STAND_IN = '''
import sys
sys.path.insert(0, {impls!r})
from torch_kv import EVERY       # KvRmsNormRopeCache in float32, updating its caches in place


def npu_kv_rmsnorm_rope_cache(kv, gamma, cos, sin, index, k_cache, ckv_cache, **kw):
    return EVERY.kv_rms_norm_rope_cache(kv, gamma, cos, sin, index, k_cache, ckv_cache,
                                        soc="A2", **kw)
'''


def test_the_kv_rmsnorm_rope_cache_module_of_the_docs_runs(tmp_path):
    """docs/real_runs.md's npu_kv.py against a stand-in torch_npu whose npu_kv_rmsnorm_rope_cache
    writes its caches in place (tests/impls/torch_kv.py): refspec run judges the caches it
    leaves behind, on the A2 cases of every cache mode and cache dtype."""
    text = (DOCS / "real_runs.md").read_text()
    module = re.search(r"```python\n(# npu_kv\.py:.*?)```", text, flags=re.S).group(1)
    (tmp_path / "npu_kv.py").write_text(module)
    impls = str(DOCS.parent / "tests" / "impls")
    (tmp_path / "torch_npu.py").write_text(KV_STAND_IN.format(impls=impls))
    refspec = runner(tmp_path)
    made = refspec("generate", "--op", "kv_rope_cache", "--soc", "A2", "-o", "kv-a2.h5")
    assert made.returncode == 0, made.stderr
    res = refspec("run", "kv-a2.h5", "--impl", "npu_kv.py", "--framework", "torch",
                  "--op", "kv_rope_cache", "--soc", "A2")
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr
    assert res.stdout.strip().splitlines()[-1].startswith("PASS: ")
    assert re.search(r"^PASS +\d+ x kv_rope_cache ckv_cache", res.stdout, re.M), res.stdout[-2000:]
