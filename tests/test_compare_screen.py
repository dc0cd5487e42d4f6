"""The screened path (refspec.compare.screen, with the self statistics of refspec.selfstats)
gives the full path's report: every count, histogram bin, maximum with its element and index,
worst element and verdict equal, the float sums within the stated bound (RMSE and mean relative
error within 1e-12 relative, cosine within 2e-12), and it is taken only where it can guarantee
that (the fallback cases are checked to take the full path). The reference is
``compare(..., fast=False)``'s step on the same golden file."""

from __future__ import annotations

import math
import os
import zlib

import h5py
import ml_dtypes
import numpy as np
import pytest

import refspec.goldens as goldens
from refspec.compare import compare, resolve_rule, screen
from refspec.compare.actuals import ArrayActual, open_bin, open_npy
from refspec.compare.judge import JudgeOptions, judge_output
from refspec.compare.standards import STANDARD_NAMES
from refspec import selfstats
from refspec.selfstats import TOP, top_order
from refspec.terms import OutputTerms

BF16 = np.dtype(ml_dtypes.bfloat16)
SHAPE = (3125, 64)                  # 200000 elements: 2 or 4 raw chunks per dataset
N = SHAPE[0] * SHAPE[1]
CASE = "screen/c1"
DTYPES = {"float32": np.dtype(np.float32), "float16": np.dtype(np.float16), "bfloat16": BF16}


@pytest.fixture(autouse=True)
def small_steps(monkeypatch):
    """Several screening steps per output (one raw chunk each), and self statistics for
    outputs of this file's size."""
    monkeypatch.setattr(screen, "SCREEN_ELEMENTS", 1 << 15)
    monkeypatch.setattr(selfstats, "MIN_ELEMENTS", 1 << 16)


def _golden_values(rng, kind):
    g = rng.standard_normal(N) * 3
    if kind == "small":
        g[::5] *= 1e-6
        g[::17] = 0.0
        g[3::29] = 2.0 ** -140
    elif kind == "negative":
        g = -np.abs(g) - 0.01
    elif kind == "large":                   # half an ulp of float32 exceeds 2^-11 here
        g *= 1e5
    elif kind == "special":
        g[7] = np.nan
        g[11] = np.inf
    elif kind == "exact":                   # exactly representable: every self error is 0
        g = np.round(g * 64) / 64
    return g


def _golden_file(tmp_path, rng, kind, dtype):
    """(path, g, e): a golden file of one output, exact values of ``kind``, rounded to ``dtype``."""
    g = _golden_values(rng, kind)
    path = str(tmp_path / "g.h5")
    return path, g, _write(path, g, dtype)


def _self_stats(path):
    with goldens.open(path) as gf:
        return gf[CASE].self_stats("y")


def _write(path, g, dtype, compression="none", cls="elementwise"):
    with np.errstate(over="ignore"):
        e = g.astype(np.float32).astype(dtype)
    with goldens.GoldenWriter(path, sweep_name="t", sweep_definition="", sweep_seed=0,
                              compression=compression) as w:
        w.write_case(CASE, op="rotary_position_embedding",
                     params={"mode": 0, "layout": "BNSD", "dtype": np.dtype(dtype).name},
                     seed=0, soc=None, distribution="random", inputs={},
                     expected={"y": e.reshape(SHAPE)}, exact={"y": g.reshape(SHAPE)},
                     terms={"y": OutputTerms(cls, None, None)}, axes={"y": "SD"})
    return e


def _perturb(rng, g, e, dtype, kind):
    a = e.copy()
    up = np.array(np.inf, dtype=dtype)
    if kind == "ulp":
        i = np.arange(0, N, 997)
        a[i] = np.nextafter(a[i], up)
    elif kind == "gross":
        a[::1013] = (g[::1013] * 1.5 + 0.25).astype(dtype)
    elif kind == "fifth":                   # 20 %: below the dense threshold, many elements
        i = np.arange(0, N, 5)
        a[i] = np.nextafter(a[i], np.where(rng.random(i.size) < 0.5, up, -up).astype(dtype))
    elif kind == "every":                   # every element off by one ulp, up or down
        a = np.nextafter(a, np.where(rng.random(N) < 0.5, up, -up).astype(dtype))
    elif kind == "small":
        a[::5] = np.nextafter(a[::5], up)
    return a


def _judge(path, a, dtype_name, standard="default", fast=True, sum_abs=None, bench=None,
           heatmaps=False, top=10, **over):
    with goldens.open(path) as gf:
        case = gf[CASE]
        rule = resolve_rule(standard, dtype_name, case.output_meta("y")["comparison_class"],
                            None, op=case.op, **over)
        opts = JudgeOptions(standard=standard, fast=fast, heatmaps=heatmaps, top=top, **over)
        actual = a if not isinstance(a, np.ndarray) else ArrayActual("arr", a.reshape(SHAPE))
        return judge_output(case, "y", actual, rule, opts, "ctx", bench, sum_abs)


SUMS = ("rmse", "cosine", "mean_rel")


def _assert_same(scr, ref, screened=True):
    assert ref.metrics.path == "full"
    assert scr.metrics.path == ("screened" if screened else "full")
    assert (scr.status, scr.reason, scr.message) == (ref.status, ref.reason, ref.message)
    ms, mr = scr.metrics, ref.metrics
    for f in ms.__dataclass_fields__:
        if f in SUMS or f == "path":
            continue
        if f == "heatmap":
            assert (ms.heatmap is None) == (mr.heatmap is None)
            if ms.heatmap is not None:
                np.testing.assert_array_equal(ms.heatmap, mr.heatmap)
            continue
        assert repr(getattr(ms, f)) == repr(getattr(mr, f)), f       # NaN prints equal
    assert math.isclose(ms.rmse, mr.rmse, rel_tol=1e-12, abs_tol=0.0)
    assert abs(ms.cosine - mr.cosine) <= 2e-12
    if mr.mean_rel is None:
        assert ms.mean_rel is None
    else:
        assert math.isclose(ms.mean_rel, mr.mean_rel, rel_tol=1e-12, abs_tol=0.0)
    if not screened:
        assert repr(ms) == repr(mr)


def _both(path, a, dname, standard="default", screened=True, **kw):
    scr = _judge(path, a, dname, standard, True, **kw)
    ref = _judge(path, a, dname, standard, False, **kw)
    _assert_same(scr, ref, screened)
    return scr, ref


@pytest.mark.parametrize("dname", list(DTYPES))
@pytest.mark.parametrize("gkind", ["normal", "small", "negative"])
def test_screened_equals_full_path(tmp_path, dname, gkind):
    dtype = DTYPES[dname]
    rng = np.random.default_rng(zlib.crc32(f"{dname}/{gkind}".encode()))
    path, g, e = _golden_file(tmp_path, rng, gkind, dtype)
    for akind in ("identical", "ulp", "gross", "fifth", "small"):
        a = _perturb(rng, g, e, dtype, akind)
        for standard in ("default", "ascend-mixed", "torch", "vendor-threshold"):
            _both(path, a, dname, standard)
    # every element perturbed: more than a quarter differ, so the full path judges
    a = _perturb(rng, g, e, dtype, "every")
    _both(path, a, dname, "default", screened=False)
    # the ratio standard judges by a benchmark: the full path
    _both(path, _perturb(rng, g, e, dtype, "ulp"), dname, "ratio", screened=False,
          bench=_perturb(rng, g, e, dtype, "gross").reshape(SHAPE))


def test_overrides_screen_only_a_stored_rule(tmp_path):
    rng = np.random.default_rng(3)
    path, g, e = _golden_file(tmp_path, rng, "normal", np.float32)
    a = _perturb(rng, g, e, np.float32, "gross")
    # the ascend-mixed numbers given as overrides: the same rule as a stored one
    _both(path, a, "float32", "torch", rtol=2.0 ** -13, atol=2.0 ** -13)
    for over in ({"rtol": 1e-3}, {"atol": 1e-4}, {"rtol": 0.0, "atol": 0.0}):
        _both(path, a, "float32", "default", screened=False, **over)
        _both(path, a, "float32", "torch", screened=False, **over)


def test_self_elements_that_fail(tmp_path):
    """vendor-threshold's absolute 2^-11 on values near 1e5: rounded values themselves fail,
    so the failure count is self failures minus M's plus the actual's."""
    rng = np.random.default_rng(4)
    path, g, e = _golden_file(tmp_path, rng, "large", np.float32)
    with goldens.open(path) as gf:
        fails = [r["fails"] for r in gf[CASE].self_stats("y")["rules"] if r["rtol"] == 0.0]
    assert fails and fails[0] > 1000
    for akind in ("identical", "ulp", "gross", "fifth"):
        scr, _ = _both(path, _perturb(rng, g, e, np.float32, akind), "float32",
                       "vendor-threshold")
        assert scr.status == "fail"


def test_errors_where_the_stored_lists_are(tmp_path):
    rng = np.random.default_rng(5)
    path, g, e = _golden_file(tmp_path, rng, "normal", np.float32)
    st = _self_stats(path)
    worst = np.asarray(next(r for r in st["rules"] if r["rtol"] == 2.0 ** -13)["worst"])
    assert worst.size == TOP
    for k, screened in ((60, True), (TOP - 5, False)):
        a = e.copy()
        hit = np.unique(np.concatenate([worst[:k], np.asarray(st["abs"][:k]),
                                        np.asarray(st["rel"][:k])]))
        a[hit] = np.nextafter(a[hit], np.float32(-np.inf)) * np.float32(0.999)
        a[::4001] = np.nextafter(a[::4001], np.float32(np.inf))
        # with TOP - 5 list entries taken, fewer than 10 self candidates are left: full path
        _both(path, a, "float32", "ascend-mixed", screened=screened)
    # a larger --top than the lists hold less the entries taken: full path
    a = e.copy()
    a[worst[:TOP - 20]] = np.nextafter(a[worst[:TOP - 20]], np.float32(np.inf))
    _both(path, a, "float32", "ascend-mixed", screened=True, top=20)
    _both(path, a, "float32", "ascend-mixed", screened=False, top=21)


def test_exactly_representable_golden_ties(tmp_path):
    """Every self error is 0: the worst elements are the first by flat index on both paths."""
    rng = np.random.default_rng(6)
    path, g, e = _golden_file(tmp_path, rng, "exact", np.float32)
    scr, _ = _both(path, e, "float32", "torch")
    assert [el.flat for el in scr.metrics.worst] == list(range(10))
    assert scr.metrics.max_abs.flat == 0 and scr.metrics.max_badness == 0.0
    a = e.copy()
    a[[5, 123456]] = np.nextafter(a[[5, 123456]], np.float32(np.inf))
    scr, _ = _both(path, a, "float32", "torch")
    assert [el.flat for el in scr.metrics.worst] == [5, 123456, 0, 1, 2, 3, 4, 6, 7, 8]


def test_fallbacks(tmp_path):
    rng = np.random.default_rng(7)
    path, g, e = _golden_file(tmp_path, rng, "normal", np.float32)
    a = _perturb(rng, g, e, np.float32, "ulp")
    # the float32 evaluation bound with S (derived from the inputs): not covered by the lists
    S = (np.abs(g) * 2 + 0.5).reshape(SHAPE)
    _both(path, a, "float32", "default", screened=False, sum_abs=S)
    # heat maps
    _both(path, a, "float32", "default", screened=False, heatmaps=True)
    # a NaN or an infinity in the actual
    b = a.copy()
    b[1000] = np.nan
    b[150000] = np.inf
    _both(path, b, "float32", "default", screened=False)
    # a sum that would cancel: the actual drops the one element that holds most of sum a^2
    g2 = g.copy()
    g2[77] = 1e6
    path2 = str(tmp_path / "g2.h5")
    e2 = _write(path2, g2, np.float32)
    b = e2.copy()
    b[77] = 0.0
    _both(path2, b, "float32", "ascend-mixed", screened=False)
    # a big-endian actual cannot be compared bit for bit with the little-endian golden
    _both(path, ArrayActual("arr", a.astype(">f4").reshape(SHAPE), np.float32), "float32",
          "default", screened=False)


def test_fallback_for_goldens_it_cannot_use(tmp_path):
    rng = np.random.default_rng(8)
    g = _golden_values(rng, "normal")
    # compressed: the chunks are not raw bytes
    lzf = str(tmp_path / "lzf.h5")
    e = _write(lzf, g, np.float32, compression="lzf")
    a = _perturb(rng, g, e, np.float32, "ulp")
    with goldens.open(lzf) as gf:
        assert gf[CASE].self_stats("y") is not None
        assert gf[CASE].expected["y"].raw_extents() is None
    _both(lzf, a, "float32", "default", screened=False)
    # written before self statistics existed
    old = str(tmp_path / "old.h5")
    _write(old, g, np.float32)
    with h5py.File(old, "r+") as f:
        del f[f"cases/{CASE}/expected/y"].attrs["self_stats"]
    with goldens.open(old) as gf:
        assert gf[CASE].self_stats("y") is None
    _both(old, a, "float32", "default", screened=False)
    # NaN/Inf in the golden: only the flag is stored
    nan = str(tmp_path / "nan.h5")
    e = _write(nan, _golden_values(rng, "special"), np.float32)
    with goldens.open(nan) as gf:
        assert gf[CASE].self_stats("y")["finite"] is False
    _both(nan, e, "float32", "default", screened=False)
    # copies: no self statistics, bitwise rule
    cp = str(tmp_path / "copy.h5")
    e = _write(cp, g, np.float32, cls="copy")
    with goldens.open(cp) as gf:
        assert gf[CASE].self_stats("y") is None
    _both(cp, _perturb(rng, g, e, np.float32, "ulp"), "float32", "default", screened=False)


def test_small_outputs_get_no_self_statistics(tmp_path):
    path = str(tmp_path / "s.h5")
    g = np.random.default_rng(9).standard_normal((255, 256))
    with goldens.GoldenWriter(path, sweep_name="t", sweep_definition="", sweep_seed=0) as w:
        w.write_case(CASE, op="rotary_position_embedding", params={}, seed=0, soc=None,
                     distribution="random", inputs={}, expected={"y": g.astype(np.float32)},
                     exact={"y": g}, terms={"y": OutputTerms("elementwise", None, None)},
                     axes={"y": "SD"})
    with h5py.File(path, "r") as f:
        assert "self_stats" not in f[f"cases/{CASE}/expected/y"].attrs


def test_raw_files_and_compare(tmp_path):
    """A .bin and a .npy actual are mapped; compare() gives the fast=False report."""
    rng = np.random.default_rng(10)
    path, g, e = _golden_file(tmp_path, rng, "normal", BF16)
    a = _perturb(rng, g, e, BF16, "gross")
    d = tmp_path / "out" / CASE
    d.mkdir(parents=True)
    a.view(np.uint16).tofile(d / "y.bin")
    _both(path, open_bin(str(d / "y.bin"), BF16, SHAPE, "bin"), "bfloat16")
    np.save(tmp_path / "y.npy", a.view(np.uint16).reshape(SHAPE))
    _both(path, open_npy(str(tmp_path / "y.npy"), BF16, SHAPE, "npy"), "bfloat16")
    r1 = compare(path, str(tmp_path / "out"))
    r2 = compare(path, str(tmp_path / "out"), fast=False)
    _assert_same(r1.results[0], r2.results[0])
    assert r1.results[0].status == "fail"


def test_raw_extents_are_the_stored_bytes(tmp_path):
    rng = np.random.default_rng(11)
    path, g, e = _golden_file(tmp_path, rng, "normal", BF16)
    with open(path, "rb") as fh:
        raw = fh.read()
    with goldens.open(path) as gf:
        for arr, want in ((gf[CASE].expected["y"], e.view(np.uint16)),
                          (gf[CASE].exact["y"], g)):
            ext = arr.raw_extents()
            assert len(ext) > (1 if want.dtype == np.float64 else 0)    # chunks of ~1 MiB
            got = np.concatenate([np.frombuffer(raw, want.dtype.newbyteorder("<"), c, off)
                                  for _, c, off in ext])
            assert [s for s, _, _ in ext] == sorted(s for s, _, _ in ext)
            np.testing.assert_array_equal(got, want.reshape(-1))


def test_self_lists_are_the_top_elements(tmp_path):
    """The stored lists against a sort of every element by Python tuples."""
    rng = np.random.default_rng(12)
    path, g, e = _golden_file(tmp_path, rng, "small", np.float16)
    st = _self_stats(path)
    ad = np.abs(e.astype(np.float64) - g)
    small = np.abs(g) < 2.0 ** -11
    want = sorted(range(N), key=lambda i: (-ad[i], i))[:TOP]
    assert st["abs"] == want
    big = np.flatnonzero(~small)
    rel = ad[big] / np.abs(g[big])
    want = [int(big[j]) for j in sorted(range(big.size), key=lambda j: (-rel[j], big[j]))[:TOP]]
    assert st["rel"] == want
    assert st["n_small"] == int(small.sum())
    assert st["small_errors"] == int((ad[small] > 2.0 ** -16).sum())


def test_top_order_against_sorting():
    rng = np.random.default_rng(13)
    for _ in range(50):
        n = int(rng.integers(1, 400))
        p = rng.integers(0, 4, n).astype(float)        # many ties
        s = rng.integers(0, 3, n).astype(float)
        T = int(rng.integers(1, 30))
        want = sorted(range(n), key=lambda i: (-p[i], -s[i], i))[:T]
        assert top_order([p, s], T).tolist() == want
        want = sorted(range(n), key=lambda i: (-p[i], i))[:T]
        assert top_order([p], T).tolist() == want


def test_every_standard_is_judged(tmp_path):
    """compare() on a golden file under every standard: the screened path where it applies,
    the same verdicts as fast=False."""
    rng = np.random.default_rng(14)
    path, g, e = _golden_file(tmp_path, rng, "normal", np.float16)
    a = _perturb(rng, g, e, np.float16, "gross")
    d = tmp_path / "out" / CASE
    d.mkdir(parents=True)
    a.tofile(d / "y.bin")
    for standard in STANDARD_NAMES:
        if standard == "ratio":
            continue                # needs the case's inputs for its benchmark
        r1 = compare(path, str(tmp_path / "out"), standard=standard)
        r2 = compare(path, str(tmp_path / "out"), standard=standard, fast=False)
        _assert_same(r1.results[0], r2.results[0])
        assert os.path.exists(d / "y.bin")


def test_contiguous_storage(tmp_path):
    """Datasets stored contiguous (one extent, split into steps) are screened too."""
    rng = np.random.default_rng(15)
    path, g, e = _golden_file(tmp_path, rng, "normal", np.float32)
    with h5py.File(path, "r+") as f:
        for sub, data in (("expected", e), ("exact", g)):
            grp = f[f"cases/{CASE}/{sub}"]
            attrs = dict(grp["y"].attrs)
            del grp["y"]
            ds = grp.create_dataset("y", data=data.reshape(SHAPE))
            ds.attrs.update(attrs)
    with goldens.open(path) as gf:
        assert len(gf[CASE].exact["y"].raw_extents()) == 1
    for akind in ("identical", "ulp", "gross"):
        _both(path, _perturb(rng, g, e, np.float32, akind), "float32", "torch")
