"""Adding a format of the user's own inputs takes one function that describes its cases, with no
other change to the package (docs/architecture.md, "Adding an input format"): a folder of
``.npz`` files of inputs, each with a ``.json`` naming its operator, attributes and chip profile,
read by a function defined in this file only, becomes a golden file through
``refspec.inputs.user_cases.write_user_cases``, computed exactly as generated cases are; a
correct implementation passes against it, a broken one fails, and a description whose outcome
the spec contradicts is refused naming the file."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

import refspec
import refspec.goldens as goldens
from refspec import ops
from refspec.comparator.sources.implementation import Implementation
from refspec.inputs.user_cases import InputError, UserCase, write_user_cases
from refspec.ops.record import Call
from refspec.spec.dtypes import bfloat16, resolve_dtype
from repo_paths import TESTS

IMPL = TESTS / "impls" / "numpy_float32.py"


def _decoded(array: np.ndarray) -> np.ndarray:
    """NumPy saves bfloat16 as 2-byte voids: their bits are bfloat16's."""
    return array.view(bfloat16) if array.dtype.kind == "V" and array.dtype.itemsize == 2 else array


def describe_npz_folder(folder) -> list[UserCase]:
    """One case per ``NAME.json`` (``{"op": ..., "attrs": {...}, "soc": ..., "rejects":
    code}``) with its inputs in ``NAME.npz`` under the spec's tensor names."""
    cases = []
    for name in sorted(os.listdir(folder)):
        if not name.endswith(".json"):
            continue
        where = os.path.join(folder, name)
        with open(where) as fh:
            doc = json.load(fh)
        record = ops.find(doc["op"])
        if record is None:
            raise InputError(f"{where}: no operator {doc['op']!r}")
        with np.load(where[:-5] + ".npz") as npz:
            inputs = {k: _decoded(npz[k]) for k in npz.files}
        attrs = record.complete_attrs(doc.get("attrs", {}))
        params = record.params_of(Call(inputs, attrs, doc.get("soc")))
        cases.append(UserCase(where=where, case_id=f"{record.id}/npz/{name[:-5]}", op=record,
                              params=params, load=lambda inputs=inputs: inputs,
                              expected_code=doc.get("rejects")))
    return cases


def _write_case(folder, name, doc, **arrays):
    np.savez(folder / f"{name}.npz", **arrays)
    (folder / f"{name}.json").write_text(json.dumps(doc))


@pytest.fixture
def folder(tmp_path, rng):
    """Two RotaryPositionEmbeddingGrad cases (float16, bfloat16) in the new format."""
    d = tmp_path / "cases"
    d.mkdir()
    for dtype in ("float16", "bfloat16"):
        dt = resolve_dtype(dtype)
        shape = (2, 3, 5, 8)                                     # B N S D
        dy, x = (rng.standard_normal(shape).astype(dt) for _ in range(2))
        theta = rng.uniform(0, 6.3, (1, 1, 5, 8))
        _write_case(d, f"rope_{dtype}", {"op": "rope_grad", "attrs": {"mode": 0}, "soc": "A2"},
                    dy=dy, cos=np.cos(theta).astype(dt), sin=np.sin(theta).astype(dt), x=x)
    return d


def test_a_format_from_outside_makes_goldens_a_kernel_is_judged_against(folder, tmp_path):
    out = tmp_path / "goldens.h5"
    summary, negatives = write_user_cases(out, describe_npz_folder(folder), sweep_name="npz",
                                          sweep_definition=str(folder))
    assert summary.cases == 2 and not negatives
    with goldens.open(out) as gf:
        assert sorted(gf.case_ids()) == ["rope_grad/npz/rope_bfloat16", "rope_grad/npz/rope_float16"]
    right = refspec.compare(out, Implementation(f"{IMPL}:EVERY", repeat=0))
    assert right.passed and len(right.results) == 6, str(right)
    wrong = refspec.compare(out, Implementation(f"{IMPL}:LOST_MINUS", repeat=0))
    assert not wrong.passed and any(r.status == "fail" for r in wrong.results), str(wrong)


def test_a_description_the_spec_contradicts_is_refused_naming_the_file(folder, tmp_path):
    doc = json.loads((folder / "rope_float16.json").read_text())
    (folder / "rope_float16.json").write_text(json.dumps({**doc, "rejects": 561002}))
    with pytest.raises(InputError, match=r"rope_float16\.json: the description says the inputs "
                                         r"are rejected with 561002, but the spec .* accepts"):
        write_user_cases(tmp_path / "g.h5", describe_npz_folder(folder), sweep_name="npz",
                         sweep_definition=str(folder))
    assert not (tmp_path / "g.h5").exists()
