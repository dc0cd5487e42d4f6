"""Golden store: writer -> reader round trips, metadata, lazy reads, reader errors."""

import json
from dataclasses import replace

import h5py
import ml_dtypes
import numpy as np
import pytest

import refspec
import refspec.goldens as goldens
from refspec.goldens.cases import CaseData
from refspec.goldens.example import nrc_backward_case, rope_grad_case

SWEEP = dict(sweep_name="unit", sweep_definition='name = "unit"\n', sweep_seed=7)


def all_bits(dtype, n=None, seed=0):
    """Every bit pattern of a 16-bit dtype, or n random patterns plus specials for wider ones."""
    dt = np.dtype(dtype)
    if dt.itemsize == 2:
        return np.arange(1 << 16, dtype=np.uint16).view(dt).reshape(16, 64, 64)
    uint = np.uint32 if dt.itemsize == 4 else np.uint64
    rng = np.random.default_rng(seed)
    bits = rng.integers(0, np.iinfo(uint).max, size=n, dtype=uint, endpoint=True)
    special = np.array([np.inf, -np.inf, 0.0, -0.0, np.finfo(dt).smallest_subnormal,
                        -np.finfo(dt).smallest_subnormal, np.finfo(dt).max], dtype=dt).view(uint)
    nan_payloads = (np.array([np.nan], dt).view(uint) | uint(1)) ^ uint(2)   # quiet NaN, payload
    bits[:special.size] = special
    bits[special.size] = nan_payloads[0]
    bits[special.size + 1] = nan_payloads[0] | (uint(1) << uint(dt.itemsize * 8 - 1))  # -NaN
    return bits.view(dt).reshape(4, -1)


def write_one(path, case_id="c/1", data=None, writer=None, **kw):
    """Write one case: ``data`` (a CaseData) under ``case_id``, or one of inputs ``kw``."""
    data = (replace(data, case_id=case_id) if data is not None else
            CaseData(case_id, kw.pop("op", "x"), kw.pop("params", {}), kw.pop("seed", 0),
                     kw.pop("inputs"), **kw))
    with goldens.GoldenWriter(path, **SWEEP, **(writer or {})) as w:
        w.write_case(data)
    return path


def bits_of(a):
    a = np.asarray(a)
    return a.view({2: np.uint16, 4: np.uint32, 8: np.uint64}[a.dtype.itemsize])


@pytest.mark.parametrize("compression", ["none", "lzf", "gzip"])
def test_every_dtype_round_trips_bit_exact(tmp_path, compression):
    arrays = {name: all_bits(dt, 4000) for name, dt in
              (("bf16", ml_dtypes.bfloat16), ("f16", np.float16), ("f32", np.float32),
               ("f64", np.float64))}
    path = write_one(tmp_path / "g.h5", op="rope", seed=1, inputs=arrays,
                     writer=dict(compression=compression))
    with goldens.open(path) as gf:
        case = gf["c/1"]
        assert case.input_names == ["bf16", "f16", "f32", "f64"]
        for name, a in arrays.items():
            lazy = case.inputs[name]
            got = lazy.read()
            assert got.dtype == a.dtype and lazy.dtype == a.dtype and got.shape == a.shape
            assert np.array_equal(bits_of(got), bits_of(a)), name
            assert lazy.nbytes == a.nbytes
            assert lazy.attrs["dtype"] == refspec.spec.dtypes.dtype_name(a.dtype)
        raw = gf.h5["cases/c/1/inputs/bf16"]
        assert raw.dtype == np.uint16 and case.inputs["bf16"].attrs["encoding"] == "bfloat16-bits"
        assert case.inputs["bf16"].attrs["dtype"] == "bfloat16"
        assert not raw.attrs and not gf.h5["cases/c/1"].attrs    # metadata in the index only
        assert gf.h5["cases/c/1/inputs/f16"].dtype == np.float16        # stored natively
        assert (raw.compression or "none") == {"gzip": "gzip", "lzf": "lzf"}.get(compression, "none")


def test_bfloat16_specials_decode_to_their_values(tmp_path):
    bits = np.array([0x7FC1, 0xFF80, 0x7F80, 0x0001, 0x8001, 0x0000, 0x8000, 0x3F80], np.uint16)
    path = write_one(tmp_path / "g.h5", op="rope", seed=1,
                     inputs={"x": bits.view(ml_dtypes.bfloat16)})
    with goldens.open(path) as gf:
        got = gf["c/1"].inputs["x"][:]
    wide = got.astype(np.float64)
    assert np.isnan(wide[0]) and wide[1] == -np.inf and wide[2] == np.inf
    assert wide[3] == 2.0 ** -133 and wide[4] == -(2.0 ** -133)          # bfloat16 subnormals
    assert wide[5] == 0 and np.signbit(wide[6]) and wide[7] == 1.0
    assert got.view(np.uint16)[0] == 0x7FC1                               # NaN payload kept


def test_rope_grad_case_metadata_and_values(tmp_path):
    kw = rope_grad_case(dtype="bfloat16", mode=1, seed=3)
    path = write_one(tmp_path / "g.h5", case_id="rope_grad/mode=interleave/B2N4S16D32", data=kw)
    with goldens.open(path) as gf:
        assert gf.complete and gf.attrs["schema_version"] == 2
        assert gf.attrs["sweep_name"] == "unit" and gf.attrs["sweep_seed"] == 7
        assert gf.attrs["sweep_definition"] == 'name = "unit"\n'
        assert gf.attrs["numpy_version"] == np.__version__
        assert gf.attrs["refspec_version"] == refspec.__version__
        assert gf.case_ids() == ["rope_grad/mode=interleave/B2N4S16D32"]
        case = gf["rope_grad/mode=interleave/B2N4S16D32"]
        assert case.op == "rope_grad" and case.seed == 3
        assert case.params == json.loads(json.dumps(kw.params))
        assert case.params["mode"] == "interleave" and case.params["layout"] == "BNSD"
        assert case.soc == "" and case.distribution == "random"
        assert case.expected_error is None and case.expected_error_message is None
        assert case.regenerate == kw.regenerate
        assert case.input_names == ["dy", "cos", "sin", "x"]
        assert case.output_names == ["dx", "dcos", "dsin"]
        # the stored outputs are what the spec computes from the stored inputs
        ins = {n: case.inputs[n][:] for n in case.input_names}
        dx, dcos, dsin = refspec.rotary_position_embedding_grad(**ins, mode=1)
        for name, want in zip(("dx", "dcos", "dsin"), (dx, dcos, dsin)):
            got = case.expected[name][:]
            assert got.dtype == ml_dtypes.bfloat16
            assert np.array_equal(bits_of(got), bits_of(want))
            exact = case.exact[name][:]
            assert exact.dtype == np.float64
            assert np.array_equal(refspec.round_to(exact, ml_dtypes.bfloat16).view(np.uint16),
                                  got.view(np.uint16))
        meta = case.output_meta("dcos")
        assert meta == {"comparison_class": "reduction", "reduced_terms": 2 * 4, "axes": "BNSD",
                        "dtype": "bfloat16"}
        assert case.output_meta("dx")["reduced_terms"] is None
        assert case.output_meta("dx")["comparison_class"] == "elementwise"
        assert "dx" not in case.sum_abs and "dcos" in case.sum_abs
        # S = sum over the broadcast axes (B, N) of |dy * P1(x)| must bound |dcos| exactly
        s = case.sum_abs["dcos"][:]
        assert s.dtype == np.float64 and s.shape == (1, 1, 16, 32)
        assert np.all(np.abs(case.exact["dcos"][:]) <= s * (1 + 1e-12))


def test_nrc_case_optional_inputs_absent_and_d_axes(tmp_path):
    kw = nrc_backward_case(dtype="float16", norm_type=2, norm_added_type=1, seed=5)
    path = write_one(tmp_path / "g.h5", case_id="nrc_grad/a", data=kw)
    with goldens.open(path) as gf:
        case = gf["nrc_grad/a"]
        assert "norm_added_query_weight" not in case.inputs        # None -> absent
        assert case.inputs["norm_query_mean"].dtype == np.float32
        assert case.inputs["query"].dtype == np.float16
        assert case.output_meta("grad_norm_query_weight")["axes"] == "D"
        assert case.output_meta("grad_norm_query_weight")["reduced_terms"] == 1 * 8 * 2
        assert case.output_meta("grad_value")["comparison_class"] == "copy"
        for name, arr in kw.expected.items():
            assert np.array_equal(bits_of(case.expected[name][:]), bits_of(arr))


def test_negative_case_has_inputs_only(tmp_path):
    kw = rope_grad_case(dtype="float32", seed=1)
    err = refspec.TilingError("dy: D=63 must be even [x]")
    path = write_one(tmp_path / "g.h5", case_id="neg/odd-d", op=kw.op,
                     params={**kw.params, "soc": "A2"}, seed=1, inputs=kw.inputs, error=err,
                     regenerate="r")
    with goldens.open(path) as gf:
        case = gf["neg/odd-d"]
        assert case.is_negative and case.expected_error == 561002
        assert case.expected_error_message == "dy: D=63 must be even [x]"
        assert case.expected_error_status == "ACLNN_ERR_INNER_TILING_ERROR"
        assert case.output_names == [] and len(case.exact) == 0 and "dx" not in case.sum_abs
        assert case.soc == "A2"
        assert "expected" not in gf.h5["cases/neg/odd-d"]


def test_lazy_slices_blocks_and_asarray(tmp_path):
    rng = np.random.default_rng(0)
    a = rng.standard_normal((5, 7, 33, 400)).astype(np.float32)     # 1.8 MB: chunked
    b = a.astype(ml_dtypes.bfloat16)                                # 0.9 MB: one chunk, contiguous
    path = write_one(tmp_path / "g.h5", inputs={"a": a, "b": b})
    with goldens.open(path) as gf:
        la, lb = gf["c/1"].inputs["a"], gf["c/1"].inputs["b"]
        assert la.shape == a.shape and la.chunks is not None and len(la) == 5
        assert lb.chunks is None
        for index in [(1,), (slice(1, 4), slice(None, None, 2), 5), (Ellipsis, 3),
                      (4, 6, 32, 399), (slice(0, 0),), ([0, 2, 4],)]:
            assert np.array_equal(la[index], a[index])
            assert np.array_equal(lb[index].view(np.uint16), b[index].view(np.uint16))
        assert lb[2, 3].dtype == ml_dtypes.bfloat16
        assert np.array_equal(np.asarray(lb).view(np.uint16), b.view(np.uint16))
        for max_bytes in (10_000, 40 * 4 * 33 + 1, 1 << 30):
            rebuilt = np.full(a.shape, np.nan, np.float32)
            sizes = []
            for index, block in la.blocks(max_bytes=max_bytes):
                rebuilt[index] = block
                sizes.append(block.nbytes)
            assert np.array_equal(rebuilt, a)
            assert max(sizes) <= max(max_bytes, 40 * 4) or len(sizes) == 1


def test_chunks_are_c_order_row_blocks():
    from refspec.goldens.format import chunk_shape
    assert chunk_shape((8, 16, 512, 128), 4) == (1, 4, 512, 128)
    assert chunk_shape((2, 3), 8, min_bytes=0) == (2, 3)
    assert chunk_shape((2, 3), 8) is None                  # small: contiguous
    assert chunk_shape((1, 8, 640, 128), 2) == (1, 4, 640, 128)   # 8 split evenly, not 6 + 2
    assert chunk_shape((1, 1, 1, 0), 2) is None and chunk_shape((), 4) is None
    assert chunk_shape((3, 1 << 20), 4) == (1, 1 << 18)


def test_empty_and_scalar_datasets(tmp_path):
    empty = np.zeros((1, 1, 1, 0), ml_dtypes.bfloat16)
    path = write_one(tmp_path / "g.h5", inputs={"e": empty, "s": np.float32(2.5)})
    with goldens.open(path) as gf:
        c = gf["c/1"]
        assert c.inputs["e"].shape == (1, 1, 1, 0) and c.inputs["e"][:].dtype == ml_dtypes.bfloat16
        assert c.inputs["s"].read() == np.float32(2.5)


def test_reader_errors(tmp_path):
    with pytest.raises(goldens.GoldenFileError, match="no such file"):
        goldens.open(tmp_path / "missing.h5")
    text = tmp_path / "text.h5"
    text.write_text("hello")
    with pytest.raises(goldens.GoldenFileError, match="not an HDF5 file"):
        goldens.open(text)
    plain = tmp_path / "plain.h5"
    with h5py.File(plain, "w") as f:
        f["x"] = 1
    with pytest.raises(goldens.GoldenFileError, match="not a refspec golden file"):
        goldens.open(plain)
    newer = write_one(tmp_path / "newer.h5", inputs={"a": np.zeros(2)})
    with h5py.File(newer, "r+") as f:
        f.attrs["schema_version"] = 3
    with pytest.raises(goldens.GoldenFileError, match="newer") as info:
        goldens.open(newer)
    assert isinstance(info.value, OSError) and str(newer) in str(info.value)
    with pytest.raises(goldens.GoldenFileError, match="directory"):
        goldens.open(tmp_path)


def test_unknown_case_is_a_clear_key_error(tmp_path):
    path = write_one(tmp_path / "g.h5", inputs={"a": np.zeros(2)})
    with goldens.open(path) as gf:
        assert "c/1" in gf and "c/2" not in gf and len(gf) == 1
        with pytest.raises(KeyError) as info:
            gf["c/2"]
        assert str(info.value).startswith("case 'c/2' is not in")
        with pytest.raises(KeyError, match="no dataset 'b'"):
            gf["c/1"].inputs["b"]
        assert [c.case_id for c in gf] == ["c/1"]


def test_writer_rejects_bad_cases(tmp_path):
    kw = rope_grad_case(seed=2)
    with goldens.GoldenWriter(tmp_path / "g.h5", **SWEEP) as w:
        with pytest.raises(ValueError, match="needs terms and axes"):
            w.write_case(replace(kw, case_id='a', axes={}))
        with pytest.raises(ValueError, match="exact outputs"):
            w.write_case(replace(kw, case_id='a', exact={}))
        with pytest.raises(ValueError, match="negative case has inputs only"):
            w.write_case(replace(kw, case_id='a', error=refspec.TilingError('x')))
        for bad in ("", "a//b", "a/../b", "/a", "a/inputs"):
            with pytest.raises(ValueError, match="case id"):
                w.write_case(replace(kw, case_id=bad))
        w.write_case(replace(kw, case_id='a/b'))
        with pytest.raises(ValueError, match="already written"):
            w.write_case(replace(kw, case_id='a/b'))
        with pytest.raises(ValueError, match="would nest inside case"):
            w.write_case(replace(kw, case_id='a/b/c'))
        w.write_case(replace(kw, case_id="a/c"))   # the failed attempts left nothing in /index
    with goldens.open(tmp_path / "g.h5") as gf:
        assert gf.case_ids() == ["a/b", "a/c"]


def test_existing_output_needs_force_or_resume(tmp_path):
    path = write_one(tmp_path / "g.h5", inputs={"a": np.zeros(2)})
    with pytest.raises(goldens.GoldenFileExistsError, match="--force") as info:
        goldens.GoldenWriter(path, **SWEEP)
    assert isinstance(info.value, FileExistsError) and isinstance(info.value, OSError)
    with goldens.GoldenWriter(path, **SWEEP, force=True) as w:
        w.write_case(CaseData('other', 'x', {}, 0, {'a': np.ones(3)}))
    with goldens.open(path) as gf:
        assert gf.case_ids() == ["other"]
    with pytest.raises(goldens.GoldenFileError, match="does not exist"):
        goldens.GoldenWriter(tmp_path / "no" / "dir.h5", **SWEEP)
    with pytest.raises(ValueError, match="compression"):
        goldens.GoldenWriter(tmp_path / "c.h5", **SWEEP, compression="zstd")


@pytest.mark.parametrize("compression, want", [
    (None, "none"), ("gzip", "gzip:1+shuffle"), ("gzip:6-shuffle", "gzip:6"),
    ("lzf", "lzf"), ("lzf+shuffle", "lzf+shuffle"), ("gzip:1+shuffle", "gzip:1+shuffle")])
def test_compression_settings_are_applied_and_recorded(tmp_path, compression, want):
    writer = {} if compression is None else dict(compression=compression)
    a = np.arange(50_000, dtype=np.float32)
    path = write_one(tmp_path / "g.h5", inputs={"a": a}, writer=writer)
    with goldens.open(path) as gf:
        assert gf.attrs["compression"] == want
        lazy = gf["c/1"].inputs["a"]
        assert lazy.compression == want and np.array_equal(lazy[:], a)
        if want != "none":        # a ramp compresses: the filter really ran
            assert lazy.stored_nbytes < a.nbytes
