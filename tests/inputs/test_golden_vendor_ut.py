"""The vendor's NormRopeConcatGrad UT layout in (refspec.inputs.vendor_ut), on data this test
writes in that layout (the vendor's script itself is exercised by test_golden_vendor_script.py
when it is available): every file gen_data.py writes, gradients BNSD, query/key BSND, float32
statistics (B, S, N, 1), rope tables (Sr, D), 0-byte files for absent encoder streams."""

from __future__ import annotations

import numpy as np
import pytest

import refspec
import refspec.goldens as goldens
from refspec.comparator import compare
from refspec.inputs.user_cases import InputError, write_user_cases
from refspec.inputs.vendor_ut import describe_vendor_ut, parse_ut_args

import implementations as impl
from msprobe_helpers import BF16

STATS = {"query": "normQuery", "key": "normKey", "encoder_query": "normAddedQuery",
         "encoder_key": "normAddedKey"}


def ut_args(B, N, D, Sq, Sk, Seq, Sek, Sr, dtype, nt, nat, rt, co) -> str:
    key = nt * 100000000 + nat * 100000 + rt * 100 + co * 10
    return f"{B} {N} {D} {Sq + Seq} {Sk + Sek} {Sq} {Sk} {Sr} {dtype} {key}"


def write_ut_folder(d, rng, B=1, N=2, D=16, Sq=5, Sk=4, Seq=3, Sek=2, Sr=6, dtype="float16",
                    nt=2, nat=1, rt=2, co=0):
    """Every input file gen_data.py writes, from this test's own data; returns the arguments
    and the inputs by spec name."""
    dt = {"float16": np.float16, "float32": np.float32, "bfloat16": BF16}[dtype]
    d.mkdir(parents=True, exist_ok=True)

    def r(*shape):
        return (rng.standard_normal(shape) * 10 - 5).astype(dt)

    t = dict(grad_query_output=r(B, N, Sq + Seq, D), grad_key_output=r(B, N, Sk + Sek, D),
             grad_value_output=r(B, N, Sk + Sek, D), query=r(B, Sq, N, D), key=r(B, Sk, N, D),
             encoder_query=r(B, Seq, N, D), encoder_key=r(B, Sek, N, D))
    for stream, prefix in STATS.items():
        x = t[stream].astype(np.float32)
        mean = np.add.reduce(x, axis=-1, dtype=np.float32, keepdims=True) / np.float32(D)
        var = np.add.reduce((x - mean) ** 2, axis=-1, dtype=np.float32, keepdims=True) / np.float32(D)
        t[f"{prefix}Mean"], t[f"{prefix}Rstd"] = mean, np.float32(1) / np.sqrt(var + np.float32(1e-5))
        t[f"{prefix}Weight"] = r(D)
    angle = np.arange(Sr)[:, None] / 10000 ** (np.arange(D) / D)
    t["ropeSin"], t["ropeCos"] = np.sin(angle).astype(dt), np.cos(angle).astype(dt)
    op = refspec.ops.get("nrc_grad")
    named = {}
    for name, a in t.items():
        a = np.ascontiguousarray(a)
        (a.view(np.uint16) if a.dtype == BF16 else a).tofile(d / op.tensor_file(op.python_name(name)))
        named[op.python_name(name)] = a
    return ut_args(B, N, D, Sq, Sk, Seq, Sek, Sr, dtype, nt, nat, rt, co), named


def test_the_tiling_key_and_the_sizes_decode_as_gen_data_py_reads_them():
    p = parse_ut_args("2 32 64 20 40 4 8 8 float32 200100210")
    assert (p["norm_type"], p["norm_added_type"], p["rope_type"], p["concat_order"]) == (2, 1, 2, 1)
    assert (p["B"], p["N"], p["D"], p["Sq"], p["Seq"], p["Sk"], p["Sek"], p["Sr"]) == \
        (2, 32, 64, 4, 16, 8, 32, 8)
    assert parse_ut_args(["1", "2", "16", "5", "4", "5", "4", "4", "bfloat16", "10"])["concat_order"] == 1


@pytest.mark.parametrize("dtype,attrs,enc", [
    ("float16", (2, 1, 2, 0), True), ("bfloat16", (0, 0, 1, 1), True),
    ("float32", (1, 2, 0, 0), True), ("float16", (2, 0, 1, 0), False)])
def test_ut_data_is_read_as_the_case_of_its_arguments(rng, tmp_path, dtype, attrs, enc):
    nt, nat, rt, co = attrs
    sizes = dict(Seq=3, Sek=2, Sr=6) if enc else dict(Seq=0, Sek=0, Sr=4)
    args, named = write_ut_folder(tmp_path / "ut", rng, dtype=dtype, nt=nt, nat=nat, rt=rt, co=co,
                                  **sizes)
    case = describe_vendor_ut(tmp_path / "ut", args)
    write_user_cases(tmp_path / "g.h5", [case], sweep_name="vendor-ut", sweep_definition="")
    a = dict(norm_type=nt, norm_added_type=nat, rope_type=rt, concat_order=co)
    needed = {k: v for k, v in named.items() if k in case.load()}
    assert ("encoder_query" in needed) == enc and ("rope_sin" in needed) == bool(rt)
    assert ("norm_query_weight" in needed) == (nt == 2) and ("norm_key_mean" in needed) == (nt > 0)
    want = refspec.norm_rope_concat_backward(**needed, **a, soc="A2", out_dtype=np.float64)
    with goldens.open(tmp_path / "g.h5") as gf:
        (cid,) = gf.case_ids()
        got = gf[cid]
        assert got.params["vendor_ut_args"] == args and got.soc == "A2"
        for name in got.output_names:
            np.testing.assert_array_equal(got.exact[name][()], getattr(want, name))
        assert got.output_names == [n for n in want._fields if getattr(want, n) is not None]
    # the kernel's outputs next to the inputs, as the UT writes them: a float32 kernel passes
    op = refspec.ops.get("nrc_grad")
    kernel = impl.nrc_backward(needed, a, np.dtype({"float16": np.float16, "float32": np.float32,
                                                    "bfloat16": BF16}[dtype]))
    for bug in (None, "concat_order_reversed"):
        out = kernel if bug is None else impl.nrc_backward(needed, a, kernel["grad_query"].dtype, bug=bug)
        for name, value in out.items():
            value = np.ascontiguousarray(value)
            (value.view(np.uint16) if value.dtype == BF16 else value).tofile(
                tmp_path / "ut" / op.tensor_file(name))
        report = compare(tmp_path / "g.h5", tmp_path / "ut")
        if bug is None:
            assert report.passed, str(report)
        elif enc:
            assert report.failures and report.failures[0].message.startswith("grad_")


def test_a_rope_table_longer_than_the_shorter_sequence_is_a_negative_case(rng, tmp_path):
    args, _ = write_ut_folder(tmp_path / "ut", rng, Sq=5, Sk=4, Seq=3, Sek=2, Sr=7, rt=1)
    summary, negatives = write_user_cases(tmp_path / "g.h5", [describe_vendor_ut(tmp_path / "ut", args)],
                                          sweep_name="vendor-ut", sweep_definition="")
    ((cid, err),) = negatives
    assert err.code == 561002 and "Sr=7" in str(err) and "min(Sq+Seq, Sk+Sek) = 6" in str(err)
    with goldens.open(tmp_path / "g.h5") as gf:
        assert gf[cid].expected_error == 561002


def test_bad_ut_data_or_arguments_are_one_clear_error(rng, tmp_path):
    d = tmp_path / "ut"
    args, named = write_ut_folder(d, rng)
    with pytest.raises(InputError, match="9 values; give gen_data.py.s 10 arguments"):
        parse_ut_args("1 2 16 8 6 5 4 6 float16")
    with pytest.raises(InputError, match="dtype = 'fp16': gen_data.py takes float32, float16, bfloat16"):
        parse_ut_args("1 2 16 8 6 5 4 6 fp16 0")
    with pytest.raises(InputError, match="must be at least Sq = 9"):
        parse_ut_args("1 2 16 8 6 9 4 6 float16 0")
    with pytest.raises(InputError, match="B = 'x' must be a whole number"):
        parse_ut_args("x 2 16 8 6 5 4 6 float16 0")
    (d / "key.bin").write_bytes((d / "key.bin").read_bytes()[:-2])
    with pytest.raises(InputError) as info:
        describe_vendor_ut(d, args)
    assert str(d / "key.bin") in str(info.value)
    assert "bytes, expected 256 for shape (1, 4, 2, 16) float16" in str(info.value)
    (d / "key.bin").unlink()
    with pytest.raises(InputError, match=r"key.bin: missing; gen_data.py writes it"):
        describe_vendor_ut(d, args)
    with pytest.raises(InputError, match="not a directory"):
        describe_vendor_ut(tmp_path / "none", args)
