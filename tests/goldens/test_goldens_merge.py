"""Merging shard files of one sweep."""

from dataclasses import replace
import h5py
import numpy as np
import pytest

import refspec.goldens as goldens
from refspec.goldens.example import rope_grad_case

SWEEP = dict(sweep_name="m", sweep_definition="[axes]\nmode = [0, 1]\n", sweep_seed=5)
IDS = [f"rope_grad/mode={m}/S={s}" for m in (0, 1) for s in (4, 8)]


def kwargs(case_id):
    mode, s = int(case_id.split("mode=")[1][0]), int(case_id.rsplit("=", 1)[1])
    return rope_grad_case(shape=(1, 2, s, 8), mode=mode, dtype="bfloat16", seed=s + mode)


def write(path, ids, compression="gzip", **sweep):
    with goldens.GoldenWriter(path, **{**SWEEP, **sweep}, compression=compression) as w:
        for case_id in ids:
            w.write_case(replace(kwargs(case_id), case_id=case_id))
    return path


def datasets(path):
    out = {}
    with h5py.File(path, "r") as f:
        def visit(name, obj):
            if isinstance(obj, h5py.Dataset) and name.startswith("cases/"):
                out[name] = (obj[()].tobytes(), dict(obj.attrs), obj.compression, obj.chunks)
            elif isinstance(obj, h5py.Group) and "case_id" in obj.attrs:
                out[name] = dict(obj.attrs)
        f.visititems(visit)
    return out


def test_merge_equals_one_unsharded_file(tmp_path):
    whole = write(tmp_path / "whole.h5", IDS)
    a = write(tmp_path / "a.h5", [IDS[2], IDS[0]])
    b = write(tmp_path / "b.h5", [IDS[3], IDS[1]])
    out = goldens.merge(tmp_path / "all.h5", [a, b])
    with goldens.open(out) as gf:
        assert gf.complete and gf.case_ids() == [IDS[2], IDS[0], IDS[3], IDS[1]]   # shard order
        assert gf.attrs["sweep_seed"] == 5 and gf.attrs["merged_from"] == '["a.h5", "b.h5"]'
        bf = gf[IDS[1]].expected["dcos"][:]
        assert bf.dtype.name == "bfloat16"
        want = kwargs(IDS[1]).expected["dcos"]
        assert np.array_equal(bf.view(np.uint16), want.view(np.uint16))
    assert datasets(out) == datasets(whole)          # bytes, attributes, filters, chunks kept
    assert not (tmp_path / "all.h5.part").exists()


def test_merge_refuses_duplicates_other_sweeps_incomplete_and_existing(tmp_path):
    a = write(tmp_path / "a.h5", IDS[:2])
    b = write(tmp_path / "b.h5", IDS[1:3])
    with pytest.raises(goldens.GoldenFileError, match=r"duplicate case id 'rope_grad/mode=0/S=8'.*a\.h5"):
        goldens.merge(tmp_path / "out.h5", [a, b])
    assert not (tmp_path / "out.h5").exists() and not (tmp_path / "out.h5.part").exists()
    c = write(tmp_path / "c.h5", IDS[3:], sweep_seed=6)
    with pytest.raises(goldens.GoldenFileError, match="not of the same sweep.*sweep_seed"):
        goldens.merge(tmp_path / "out.h5", [a, c])
    d = write(tmp_path / "d.h5", IDS[3:], sweep_definition="other")
    with pytest.raises(goldens.GoldenFileError, match="sweep_definition differs"):
        goldens.merge(tmp_path / "out.h5", [a, d])
    with pytest.raises(RuntimeError):
        with goldens.GoldenWriter(tmp_path / "e.h5", **SWEEP) as w:
            w.write_case(replace(kwargs(IDS[3]), case_id=IDS[3]))
            raise RuntimeError
    with pytest.raises(goldens.GoldenFileError, match="incomplete"):
        goldens.merge(tmp_path / "out.h5", [a, tmp_path / "e.h5.part"])
    with pytest.raises(goldens.GoldenFileError, match="no such file"):
        goldens.merge(tmp_path / "out.h5", [a, tmp_path / "missing.h5"])
    ok = write(tmp_path / "ok.h5", IDS[2:])
    goldens.merge(tmp_path / "out.h5", [a, ok])
    with pytest.raises(goldens.GoldenFileExistsError, match="--force"):
        goldens.merge(tmp_path / "out.h5", [a, ok])
    with pytest.raises(goldens.GoldenFileError, match="also one of the shards"):
        goldens.merge(a, [a, ok], force=True)
    goldens.merge(tmp_path / "out.h5", [ok, a], force=True)
    with goldens.open(tmp_path / "out.h5") as gf:
        assert gf.case_ids() == IDS[2:] + IDS[:2]


def shards_of(tmp_path, n, ids=IDS, **attrs):
    """The shard files of ``ids`` as `generate --shard K/N` writes them (index mod N)."""
    return [write(tmp_path / f"s{k}.h5", ids[k - 1::n], extra_attrs={"shard": f"{k}/{n}", "tier": "t"},
                  **attrs) for k in range(1, n + 1)]


def test_merge_of_shards_restores_the_unsharded_order(tmp_path):
    parts = shards_of(tmp_path, 3)
    out = goldens.merge(tmp_path / "all.h5", parts[::-1])
    with goldens.open(out) as gf:
        assert gf.complete and gf.case_ids() == IDS and "partial" not in gf.attrs
        assert "shard" not in gf.attrs and gf.attrs["tier"] == "t"
        assert [r.case_id for r in gf.summary()] == IDS


def test_merge_names_missing_shards_and_allow_partial_marks_the_file(tmp_path):
    parts = shards_of(tmp_path, 4)
    with pytest.raises(goldens.GoldenFileError, match=r"missing shards 2/4, 4/4.*--allow-partial"):
        goldens.merge(tmp_path / "out.h5", [parts[0], parts[2]])
    assert not (tmp_path / "out.h5").exists()
    out = goldens.merge(tmp_path / "out.h5", [parts[0], parts[2]], allow_partial=True)
    with pytest.raises(goldens.IncompleteGoldenError, match="partial merge.*allow_incomplete"):
        goldens.open(out)
    with goldens.open(out, allow_incomplete=True) as gf:
        assert not gf.complete and gf.attrs["partial"] == "missing shards 2/4, 4/4"
        assert gf.case_ids() == [IDS[0], IDS[2]]


def test_merge_refuses_shards_of_other_runs(tmp_path):
    parts = shards_of(tmp_path, 2)
    other = write(tmp_path / "o.h5", IDS[1::2], extra_attrs={"shard": "2/2", "tier": "t"}, sweep_seed=9)
    with pytest.raises(goldens.GoldenFileError, match="sweep_seed differs"):
        goldens.merge(tmp_path / "out.h5", [parts[0], other], allow_partial=True)
    tier = write(tmp_path / "t.h5", IDS[1::2], extra_attrs={"shard": "2/2", "tier": "quick"})
    with pytest.raises(goldens.GoldenFileError, match="tier differs"):
        goldens.merge(tmp_path / "out.h5", [parts[0], tier])
    split3 = write(tmp_path / "x.h5", IDS[1::3], extra_attrs={"shard": "2/3", "tier": "t"})
    with pytest.raises(goldens.GoldenFileError, match="different splits"):
        goldens.merge(tmp_path / "out.h5", [parts[0], split3])
    with pytest.raises(goldens.GoldenFileError, match="given twice"):
        goldens.merge(tmp_path / "out.h5", [parts[0], parts[0]])


def test_merge_of_an_interrupted_shard_needs_allow_partial(tmp_path):
    first = shards_of(tmp_path, 2)[0]
    with pytest.raises(RuntimeError):
        with goldens.GoldenWriter(tmp_path / "i2.h5", **SWEEP, extra_attrs={"shard": "2/2", "tier": "t"}) as w:
            w.write_case(replace(kwargs(IDS[1]), case_id=IDS[1]))
            raise RuntimeError
    with pytest.raises(goldens.GoldenFileError, match="incomplete"):
        goldens.merge(tmp_path / "out.h5", [first, tmp_path / "i2.h5.part"])
    out = goldens.merge(tmp_path / "out.h5", [first, tmp_path / "i2.h5.part"], allow_partial=True)
    with goldens.open(out, allow_incomplete=True) as gf:
        assert not gf.complete and "incomplete" in gf.attrs["partial"]
        assert gf.case_ids() == [IDS[0], IDS[1], IDS[2]]
