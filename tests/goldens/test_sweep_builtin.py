"""The built-in sweeps cover what docs/sweeps.md promises, and every block's `expect` holds."""

from __future__ import annotations

import itertools

import pytest

from refspec.goldens.cases import probe
from refspec.goldens.engine import check_expectations
from refspec.goldens.sweep import BUILTIN_SWEEPS, builtin_sweeps, load_sweep

A2_PATTERNS = {"half": {"BNSD": {"11SD", "B1SD", "BNSD"}, "BSND": {"1S1D", "BS1D", "BSND"},
                        "SBND": {"S11D", "SB1D", "SBND"}, "TND": {"T1D", "TND"}},
               "interleave": {"BNSD": {"11SD"}, "BSND": {"1S1D"}, "SBND": {"S11D"}, "TND": {"T1D"}}}


def eight_patterns(layout):
    lead = layout[:3]
    return {"".join(l if keep else "1" for l, keep in zip(lead, mask)) + "D"
            for mask in itertools.product((0, 1), repeat=3)}


@pytest.fixture(scope="module")
def smoke():
    return load_sweep("smoke")


@pytest.fixture(scope="module")
def standard():
    return load_sweep("standard")


def test_builtins_ship_in_the_package():
    assert set(BUILTIN_SWEEPS) <= set(builtin_sweeps())


def test_smoke_covers_every_mode_layout_pattern_dtype_x_and_distribution(smoke):
    cases = smoke.cases()
    assert smoke.default_tier == "smoke" and 100 < len(cases) < 400
    positive = [c for c in cases if probe(c.params) is None]
    grads = [c.params for c in positive if c.op == "rope_grad"]
    seen = {(p["soc"], p["mode"], p["layout"], p["cos"]) for p in grads}
    for mode, layouts in A2_PATTERNS.items():
        for layout, patterns in layouts.items():
            for pat in patterns:
                assert ("A2", mode, layout, pat) in seen, (mode, layout, pat)
    for layout in ("BNSD", "BSND", "SBND"):
        for pat in eight_patterns(layout):
            assert any(s == "950" and l == layout and c == pat for s, _m, l, c in seen), (layout, pat)
    assert {m for s, m, _l, _c in seen if s == "950"} == {"half", "interleave", "quarter",
                                                          "interleave-half"}
    for p_list in (grads, [c.params for c in positive if c.op == "rope"]):
        assert {p["dtype"] for p in p_list} >= {"float16", "bfloat16", "float32"}
        assert {p["dist"] for p in p_list} >= {"random", "rotary", "position-coded", "special"}
    assert {p["x"] for p in grads} == {True, False}
    assert {p["dist"] for p in grads} == {"random", "rotary", "vendor", "position-coded", "special"}


def test_smoke_has_all_54_norm_rope_concat_combinations(smoke):
    combos = {(c.params["norm_type"], c.params["norm_added_type"], c.params["rope_type"],
               c.params["concat_order"]) for c in smoke.cases() if c.op == "nrc_grad"
              and probe(c.params) is None}
    assert combos == set(itertools.product((0, 1, 2), (0, 1, 2), ("none", "interleave", "half"), (0, 1)))
    fwd = [c.params for c in smoke.cases() if c.op == "nrc" and probe(c.params) is None]
    assert {p["training"] for p in fwd} == {True, False}


def test_smoke_has_negative_cases_of_every_error_code_and_profile(smoke):
    codes = {}
    for c in smoke.cases():
        err = probe(c.params)
        if err is not None:
            codes.setdefault(err.code, set()).add((c.op, c.params["soc"]))
    assert set(codes) == {161001, 161002, 561002}
    socs = {soc for v in codes.values() for _op, soc in v}
    assert {"A2", "950"} <= socs
    ops = {op for v in codes.values() for op, _soc in v}
    assert ops == {"rope_grad", "rope", "nrc_grad", "nrc", "apply_rope_v2", "rope_cache",
                   "interleave_rope", "kv_rope_cache", "kv_rope_cache_v2", "dequant_rope_kv",
                   "qkv_rope_cache"}


@pytest.mark.parametrize("name, tier", [("smoke", "smoke"), ("standard", "quick"),
                                        ("standard", "all"), ("full", "all")])
@pytest.mark.parametrize("op", ["nrc", "nrc_grad"])
def test_norm_rope_concat_eps_is_swept(name, tier, op):
    """Every built-in sweep has NormRopeConcat forward cases with eps 1e-5, 1e-6 and 0.1 in
    each dtype, and backward cases whose statistics were computed with them, small-variance
    rows (position-coded) among them; only the default eps is left out of case ids."""
    cases = [c for c in load_sweep(name).cases(tier) if c.op == op and c.params["fault"] == "none"]
    seen = {(c.params["eps"], c.params["dtype"]) for c in cases}
    for eps in (1e-5, 1e-6, 0.1):
        assert {(eps, d) for d in ("float16", "bfloat16", "float32")} <= seen, eps
        assert any(c.params["eps"] == eps and c.params["dist"] == "position-coded" for c in cases)
    assert all(("/eps=" in c.id) == (c.params["eps"] != 1e-5) for c in cases)


def test_both_profiles_are_in_ids_and_params(smoke):
    for c in smoke.cases():
        soc = c.params["soc"] or "none"
        assert f"/soc={soc}/" in c.id


@pytest.mark.parametrize("name", ["smoke", "standard"])
def test_every_block_expectation_holds(name, smoke, standard):
    sweep = {"smoke": smoke, "standard": standard}[name]
    outcome = check_expectations(sweep, sweep.cases("all" if name == "standard" else None))
    assert any(v is None for v in outcome.values()) and any(v is not None for v in outcome.values())


def test_standard_has_the_edge_shapes(standard):
    cases = standard.cases()
    rg = [c.params for c in cases if c.op == "rope_grad"]
    accepted = [p for p, c in zip(rg, [c for c in cases if c.op == "rope_grad"])
                if probe(c.params) is None]
    Ds = {p["D"] for p in accepted}
    assert {2, 10, 14, 894, 1024} <= Ds
    assert any(p["D"] == 894 and p["soc"] == "A2" for p in accepted)
    assert any(p["D"] == 1024 and p["soc"] == "950" for p in accepted)
    assert any(p["S"] == 1 for p in accepted) and any(p["B"] == 1 for p in accepted)
    assert any(p["layout"] == "TND" and p["B"] * p["S"] == 1 for p in accepted)
    bn = {(p["mode"], p["x"], p["B"] * p["N"], probe(p) is None) for p in rg if p["soc"] == "A2"}
    assert ("half", True, 1024, True) in bn and ("half", True, 1025, False) in bn
    assert ("interleave", True, 999, True) in bn and ("interleave", True, 1000, False) in bn
    assert any(p["D"] == 896 and p["soc"] == "A2" and probe(p) is not None for p in rg)
    nrc = [c.params for c in cases if c.op == "nrc_grad" and probe(c.params) is None]
    assert any(p["Sr"] == 1 for p in nrc)
    assert any(p["rope_type"] != "none" and p["Sr"] == min(p["Sq"] + p["Seq"], p["Sk"] + p["Sek"]) for p in nrc)
    assert any(p["Seq"] == 0 and p["Sek"] == 0 for p in nrc)
    assert any(p["D"] == 1024 for p in nrc)
    combos = {(p["norm_type"], p["norm_added_type"], p["rope_type"], p["concat_order"], p["dtype"])
              for p in nrc}
    assert len(combos) >= 54 * 3


def test_standard_quick_tier_is_a_covering_subset(standard):
    quick, everything = standard.cases("quick"), {c.id for c in standard.cases("all")}
    assert 0 < len(quick) < len(everything) and {c.id for c in quick} <= everything
    assert {c.params["soc"] for c in quick} >= {"A2", "950"}


@pytest.mark.parametrize("name", ["smoke", "standard", "full"])
def test_every_tier_of_every_built_in_sweep_loads_and_covers_every_block(name):
    """Each tier picks at least one case of every block it subsamples (a cap too small for the
    block's cover groups is a load error: this catches it for the shipped sweeps)."""
    sweep = load_sweep(name)
    for tier in sweep.tier_names():
        blocks = {c.block for c in sweep.cases(tier)}
        assert blocks == {b.name for b in sweep.blocks}, tier
