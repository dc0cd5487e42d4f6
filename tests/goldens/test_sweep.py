"""Sweep files: loading, validation errors, constraints, case ids, seeds, tiers, filters, shards."""

from __future__ import annotations

from dataclasses import replace
import hashlib
import re
import textwrap

import pytest

from refspec import ops
from refspec.goldens.selection import filter_cases, normalize_filter, parse_shard, parse_where, shard
from refspec.goldens.sweep import Constraint, ExprError, SweepError, case_seed, load_sweep, parse_sweep

BASE = """
name = "t"
seed = 7
"""

ROPE_BLOCK = """
[[block]]
name = "b"
op = "rope_grad"
[block.axes]
soc = "A2"
mode = ["half", "interleave"]
layout = ["BNSD", "TND"]
cos = ["11SD", "T1D"]
dtype = ["bfloat16", "float32"]
x = [true, false]
shape = ["B2N8S128D64"]
"""


def sweep_of(text: str):
    return parse_sweep(textwrap.dedent(text), "t.toml")


# --- case ids and seeds -------------------------------------------------------------------------

def test_case_id_is_readable_and_exact():
    s = sweep_of(BASE + ROPE_BLOCK)
    ids = [c.id for c in s.all_cases()]
    assert "rope_grad/soc=A2/mode=half/layout=BNSD/cos=11SD/dtype=bfloat16/x=1/dist=random/B2N8S128D64" in ids
    assert "rope_grad/soc=A2/mode=interleave/layout=TND/cos=T1D/dtype=float32/x=0/dist=random/B2N8S128D64" in ids
    # cos patterns that do not fit the layout describe no tensor and are not cases
    assert not any("layout=TND/cos=11SD" in i or "layout=BNSD/cos=T1D" in i for i in ids)
    assert len(ids) == 2 * 2 * 2 * 2


def test_case_ids_do_not_depend_on_axis_order_in_the_file():
    reordered = BASE + ROPE_BLOCK.replace(
        'mode = ["half", "interleave"]\nlayout = ["BNSD", "TND"]',
        'layout = ["TND", "BNSD"]\nmode = ["interleave", "half"]')
    assert reordered != BASE + ROPE_BLOCK
    a = {c.id for c in sweep_of(BASE + ROPE_BLOCK).all_cases()}
    b = {c.id for c in sweep_of(reordered).all_cases()}
    assert a == b


def test_case_seed_is_sha256_of_sweep_seed_and_id():
    cid = "rope_grad/soc=A2/mode=half/layout=BNSD/cos=11SD/dtype=bfloat16/x=1/dist=random/B2N8S128D64"
    want = int.from_bytes(hashlib.sha256(f"7:{cid}".encode()).digest()[:8], "little")
    assert case_seed(7, cid) == want
    s = sweep_of(BASE + ROPE_BLOCK)
    assert s.case(cid).seed == want
    assert s.case(cid, seed=8).seed == case_seed(8, cid) != want
    # a case's seed does not depend on which other cases the sweep has
    smaller = sweep_of(BASE + ROPE_BLOCK.replace('x = [true, false]', 'x = [true]'))
    assert smaller.case(cid).seed == want


def test_params_are_canonical():
    s = sweep_of(BASE + ROPE_BLOCK)
    c = s.case("rope_grad/soc=A2/mode=interleave/layout=TND/cos=T1D/dtype=float32/x=0/dist=random/B2N8S128D64")
    p = c.params
    assert (p["mode"], p["layout"], p["cos"], p["dtype"], p["x"], p["soc"]) == \
        ("interleave", "TND", "T1D", "float32", False, "A2")
    assert (p["B"], p["N"], p["S"], p["D"], p["T"]) == (2, 8, 128, 64, 256)
    assert c.op == "rope_grad" and ops.get(c.op).attrs_of(p) == {"mode": 1}


def test_axis_value_aliases_normalize():
    s = sweep_of(BASE + """
[[block]]
op = "rope_grad"
[block.axes]
soc = "ascend950"
mode = [0, 3]
layout = "bnsd"
cos = "11sd"
dtype = ["bf16", "fp32"]
x = [1]
shape = [{B = 2, N = 3, S = 4, D = 8}]
""")
    ids = [c.id for c in s.all_cases()]
    assert ids[0] == "rope_grad/soc=950/mode=half/layout=BNSD/cos=11SD/dtype=bfloat16/x=1/dist=random/B2N3S4D8"
    assert any("mode=interleave-half" in i for i in ids)


def test_nrc_shape_defaults_and_sr_min():
    s = sweep_of(BASE + """
[[block]]
op = "nrc_grad"
[block.axes]
soc = "A2"
rope_type = ["none", "half"]
dtype = "float32"
shape = ["B1N2Sq3Sk4Seq2Sek2D8", "B1N2Sq3Sk4D8", {B = 1, N = 2, Sq = 3, Sk = 4, D = 8, Sr = 1}]
""")
    ids = [c.id for c in s.all_cases()]
    assert "nrc_grad/soc=A2/norm_type=0/norm_added_type=0/rope_type=half/concat_order=0/dtype=float32/dist=random/B1N2Sq3Sk4Seq2Sek2D8Sr5" in ids
    assert "nrc_grad/soc=A2/norm_type=0/norm_added_type=0/rope_type=half/concat_order=0/dtype=float32/dist=random/B1N2Sq3Sk4Seq0Sek0D8Sr3" in ids
    assert "nrc_grad/soc=A2/norm_type=0/norm_added_type=0/rope_type=half/concat_order=0/dtype=float32/dist=random/B1N2Sq3Sk4Seq0Sek0D8Sr1" in ids
    # without RoPE there is no table: Sr is 0 and not in the id; equal cases are not repeated
    none_ids = [i for i in ids if "rope_type=none" in i]
    assert sorted(none_ids) == sorted({i for i in none_ids}) and len(none_ids) == 2
    assert all("Sr" not in i.rsplit("/", 1)[1] for i in none_ids)


# --- constraints ------------------------------------------------------------------------------

def test_constraint_filters_cases():
    s = sweep_of(BASE + ROPE_BLOCK + """
[block.constraints]
only_half_with_x = "mode == 'half' and x"
small_enough = "B * N <= 16 and T == 256 and max(B, N) < 10"
""")
    cases = s.all_cases()
    assert cases and all(c.params["mode"] == "half" and c.params["x"] for c in cases)


def test_constraint_evaluator_semantics():
    env = {"mode": "half", "B": 3, "N": 5, "x": True, "cos": "11SD"}
    assert Constraint("a", "B * N == 15 and not (B > N) and N % B == 2 and N // B == 1")(env)
    assert Constraint("b", "cos in ('11SD', 'T1D') and '1' in cos and len(cos) == 4")(env)
    assert Constraint("c", "-B < 0 < B and min(B, N, 4) == 3 and abs(-2) == 2")(env)
    assert Constraint("d", "x + (mode == 'half') == 2")(env)
    assert not Constraint("e", "mode != 'half' or B > 3")(env)


@pytest.mark.parametrize("text, what", [
    ("__import__('os')", "call of __import__"),
    ("__import__('os').system('true')", "call of an expression"),
    ("mode.upper() == 'HALF'", "call of an expression"),
    ("cos[0] == '1'", "Subscript"),
    ("(lambda: 1)()", "call of an expression"),
    ("[c for c in cos]", "ListComp"),
    ("B ** 1000", "BinOp"),
    ("x if B else N", "IfExp"),
    ("{'a': 1}", "Dict"),
])
def test_constraint_rejects_anything_outside_the_whitelist(text, what):
    with pytest.raises(ExprError) as info:
        Constraint("bad", text)
    assert what in str(info.value)


def test_constraint_errors_at_evaluation_are_clear():
    with pytest.raises(ExprError, match="arithmetic needs numbers"):
        Constraint("s", "mode * 3")({"mode": "half"})
    with pytest.raises(ExprError, match="ZeroDivisionError"):
        Constraint("z", "B // 0")({"B": 1})


# --- validation errors --------------------------------------------------------------------------

@pytest.mark.parametrize("edit, message", [
    (lambda t: t.replace('mode = ["half", "interleave"]', 'mode = ["halfx"]'),
     "axis 'mode': unknown value 'halfx'; allowed: half, interleave"),
    (lambda t: t.replace('dtype = ["bfloat16", "float32"]', 'dtype = ["fp8"]'),
     "axis 'dtype': unknown value 'fp8'"),
    (lambda t: t.replace('layout = ["BNSD", "TND"]', 'layout = ["BSDN"]'), "axis 'layout'"),
    (lambda t: t.replace('cos = ["11SD", "T1D"]', 'cos = ["11DS"]'), "not a cos/sin pattern"),
    (lambda t: t.replace('cos = ["11SD", "T1D"]', 'cos = ["1S1D"]'), "fits none of the layouts"),
    (lambda t: t.replace('soc = "A2"', 'soc = "A9"'), "axis 'soc'"),
    (lambda t: t.replace('soc = "A2"\n', ''), "axis 'soc' is required"),
    (lambda t: t.replace('shape = ["B2N8S128D64"]', 'shape = ["B2N8S128"]'), "lacks 'D'"),
    (lambda t: t.replace('shape = ["B2N8S128D64"]', 'shape = ["B2N8Q128D64"]'), "cannot read"),
    (lambda t: t.replace('shape = ["B2N8S128D64"]', 'shape = [{B=2, N=8, S=-1, D=4}]'), "integer >= 0"),
    (lambda t: t.replace('x = [true, false]', 'x = ["maybe"]'), "axis 'x'"),
    (lambda t: t.replace('x = [true, false]', 'colour = ["red"]'), "unknown axis 'colour'"),
    (lambda t: t.replace('op = "rope_grad"', 'op = "softmax"'), "op 'softmax' unknown"),
    (lambda t: t.replace('name = "b"', 'name = "b"\nexpect = "maybe"'), "expect 'maybe' unknown"),
    (lambda t: t.replace('x = [true, false]', 'x = [true, true]'), "lists a value twice"),
    (lambda t: t + '[block.constraints]\nc = "M > 1"\n', "unknown name 'M'"),
    (lambda t: t + '[block.constraints]\nc = "B >"\n', "syntax error"),
    (lambda t: t + '[block.constraints]\nc = 3\n', "must be a string expression"),
    (lambda t: t.replace('seed = 7', 'seed = "x"'), "'seed' must be an integer"),
    (lambda t: t.replace('name = "t"', 'nome = "t"'), "unknown top-level key 'nome'"),
    (lambda t: t.replace('seed = 7', 'seed = 7\ndefault_tier = "nope"'),
     "default_tier 'nope' is not a tier"),
    (lambda t: t.replace('seed = 7', 'seed = 7\n[tiers.all]\ncap = 1\n'), "tier 'all' is implicit"),
    (lambda t: t + '[block.tiers]\nquick = 3\n', "tiers.quick: no such tier"),
])
def test_validation_errors_name_file_block_and_value(edit, message):
    text = edit(textwrap.dedent(BASE + ROPE_BLOCK))
    with pytest.raises(SweepError) as info:
        parse_sweep(text, "t.toml")
    assert message in str(info.value)
    assert str(info.value).startswith("t.toml")


def test_malformed_toml_names_file_and_line(tmp_path):
    path = tmp_path / "broken.toml"
    path.write_text('name = "x"\nseed = 1\n[[block]]\nop = "rope_grad\n')
    with pytest.raises(SweepError) as info:
        load_sweep(str(path))
    msg = str(info.value)
    assert str(path) in msg and "malformed TOML" in msg and "line 4" in msg


def test_unknown_sweep_names_the_builtins():
    with pytest.raises(SweepError, match="unknown sweep 'nosuch'; built-in: .*smoke.*standard"):
        load_sweep("nosuch")
    with pytest.raises(SweepError, match="does not exist"):
        load_sweep("missing/file.toml")


def test_empty_sweep_is_an_error():
    with pytest.raises(SweepError, match="no \\[\\[block\\]\\]"):
        parse_sweep('name = "x"\n', "e.toml")


def test_include_and_circular_include(tmp_path):
    (tmp_path / "a.toml").write_text(textwrap.dedent(BASE + ROPE_BLOCK))
    (tmp_path / "b.toml").write_text('name = "b"\nseed = 7\ninclude = ["a.toml"]\n')
    b = load_sweep(str(tmp_path / "b.toml"))
    assert len(b.all_cases()) == 16 and "included: a.toml" in b.definition
    (tmp_path / "c.toml").write_text('name = "c"\ninclude = ["d.toml"]\n')
    (tmp_path / "d.toml").write_text('name = "d"\ninclude = ["c.toml"]\n')
    with pytest.raises(SweepError, match="circular"):
        load_sweep(str(tmp_path / "c.toml"))


# --- tiers ------------------------------------------------------------------------------------

TIERED = BASE + """
default_tier = "quick"
[tiers.quick]
cap = 5
cover = ["mode", ["layout", "cos"], "x"]
""" + ROPE_BLOCK.replace('dtype = ["bfloat16", "float32"]', 'dtype = ["float16", "bfloat16", "float32"]') \
    .replace('shape = ["B2N8S128D64"]', 'shape = ["B2N8S128D64", "B2N4S16D32", "B3N2S7D16"]')


def test_tier_subsample_is_capped_covering_and_deterministic():
    s = sweep_of(TIERED)
    everything = s.cases("all")
    quick = s.cases()
    assert len(everything) == 2 * 2 * 3 * 2 * 3 and len(quick) == 5
    assert {c.params["mode"] for c in quick} == {"half", "interleave"}
    assert {c.params["layout"] for c in quick} == {"BNSD", "TND"}
    assert {c.params["x"] for c in quick} == {True, False}
    assert [c.id for c in sweep_of(TIERED).cases()] == [c.id for c in quick]
    # sweep order is kept, and every quick case is one of all
    order = [c.id for c in everything]
    assert [order.index(c.id) for c in quick] == sorted(order.index(c.id) for c in quick)
    assert all(c.params["tiers"] == ["all", "quick"] for c in quick)


def test_tier_seed_changes_the_subsample_not_the_data_seed():
    a = sweep_of(TIERED)
    b = sweep_of(TIERED.replace("cap = 5", "cap = 5\nseed = 99"))
    ids_a, ids_b = [c.id for c in a.cases()], [c.id for c in b.cases()]
    assert ids_a != ids_b
    common = set(ids_a) & set(ids_b)
    for cid in common:
        assert a.case(cid).seed == b.case(cid).seed


def test_data_seed_override_keeps_the_subsample():
    s = sweep_of(TIERED)
    assert [c.id for c in s.cases(seed=1)] == [c.id for c in s.cases()]
    assert all(c.seed == case_seed(1, c.id) for c in s.cases(seed=1))


def test_tier_cap_smaller_than_cover_is_an_error():
    with pytest.raises(SweepError, match="needs .* cases to cover .* but its cap is 1"):
        sweep_of(TIERED.replace("cap = 5", "cap = 1"))


def test_block_tier_overrides():
    s = sweep_of(TIERED + '[block.tiers]\nquick = "all"\n')
    assert len(s.cases("quick")) == len(s.cases("all"))
    s = sweep_of(TIERED + '[block.tiers.quick]\ncap = 0\n')
    with pytest.raises(SweepError, match="no tier 'nosuch'"):
        s.cases("nosuch")
    assert s.cases("quick") == []


def test_unknown_case_id():
    s = sweep_of(BASE + ROPE_BLOCK)
    with pytest.raises(SweepError, match="not in sweep 't'"):
        s.case("rope_grad/soc=A2/nope")


# --- filters and shards -----------------------------------------------------------------------

def test_filters_and_their_errors():
    s = sweep_of(BASE + ROPE_BLOCK)
    cases = s.all_cases()
    bf = filter_cases(cases, dtypes={normalize_filter("dtype", "bf16")},
                      modes={normalize_filter("mode", "1")},
                      layouts={normalize_filter("layout", "tnd")})
    assert bf and all(c.params["dtype"] == "bfloat16" and c.params["mode"] == "interleave"
                      and c.params["layout"] == "TND" for c in bf)
    assert filter_cases(cases, ops={normalize_filter("op", "rotary_position_embedding")}) == []
    for kind, value in (("dtype", "fp8"), ("mode", "spiral"), ("layout", "NCHW"), ("op", "gemm"),
                        ("soc", "910")):
        with pytest.raises(SweepError, match=f"--{kind}: unknown value"):
            normalize_filter(kind, value)


def test_where_names_any_axis_of_a_record_and_reads_its_value():
    cases = load_sweep("smoke").all_cases()
    chosen = filter_cases(cases, where=[parse_where("cos=11sd"), parse_where("dist= special")])
    assert {"rope_grad", "rope"} <= {c.op for c in chosen}
    assert all(c.params["cos"] == "11SD" and c.params["dist"] == "special" for c in chosen)
    either = filter_cases(cases, where=[parse_where("norm_type=1"), parse_where("norm_type=2")])
    assert {c.params["norm_type"] for c in either} == {1, 2}
    assert {c.op for c in either} == {"nrc", "nrc_grad"}
    for bad, says in (("dist", "must be AXIS=VALUE"), ("=special", "must be AXIS=VALUE"),
                      ("dsit=special", "no operator has an axis 'dsit'; axes: "),
                      ("dist=odd", "--where dist=: unknown value 'odd'; allowed: ")):
        with pytest.raises(SweepError, match=re.escape(says)):
            parse_where(bad)


def test_shards_partition_by_index_mod_n():
    items = list(range(10))
    parts = [shard(items, k, 3) for k in (1, 2, 3)]
    assert parts == [[0, 3, 6, 9], [1, 4, 7], [2, 5, 8]]
    assert parse_shard("2/8") == (2, 8)
    for bad in ("0/2", "3/2", "a/b", "1"):
        with pytest.raises(SweepError, match="K/N"):
            parse_shard(bad)
