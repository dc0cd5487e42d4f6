"""The operator records' names against the spec functions' signatures and the vendor files."""

import inspect
import re

import pytest

import refspec
from refspec import ops


@pytest.mark.parametrize("op", ops.ids())
def test_inputs_and_attributes_are_exactly_the_spec_parameters_in_order(op):
    record = ops.get(op)
    params = [p for p in inspect.signature(record.spec).parameters
              if p not in ("soc", "out_dtype", "sum_dtype", "norm_axis")]
    assert list(record.input_names) + list(record.attributes) == params
    assert record.spec is getattr(refspec, record.function)


def test_outputs_are_exactly_the_spec_outputs():
    assert ops.get("nrc").output_names == refspec.NormRopeConcatOutputs._fields
    assert ops.get("nrc_grad").output_names == refspec.NormRopeConcatGrads._fields
    assert ops.get("rope_grad").output_names == ("dx", "dcos", "dsin")
    assert ops.get("rope").output_names == ("y",)


def test_three_names_each():
    assert [o.names for o in ops.OPERATORS.values()] == [
        ("rope_grad", "rotary_position_embedding_grad", "aclnnRotaryPositionEmbeddingGrad"),
        ("rope", "rotary_position_embedding", "aclnnRotaryPositionEmbedding"),
        ("nrc_grad", "norm_rope_concat_backward", "aclnnNormRopeConcatBackward"),
        ("nrc", "norm_rope_concat", "aclnnNormRopeConcat"),
        ("apply_rope", "apply_rotary_pos_emb", "aclnnApplyRotaryPosEmb"),
        ("apply_rope_v2", "apply_rotary_pos_emb_v2", "aclnnApplyRotaryPosEmbV2"),
        ("rope_cache", "rope_with_sin_cos_cache", "aclnnRopeWithSinCosCache"),
        ("interleave_rope", "interleave_rope", "aclnnInterleaveRope"),
        ("kv_rope_cache", "kv_rms_norm_rope_cache", "aclnnKvRmsNormRopeCache"),
        ("kv_rope_cache_v2", "kv_rms_norm_rope_cache_v2", "aclnnKvRmsNormRopeCacheV2"),
        ("dequant_rope_kv", "dequant_rope_quant_kvcache", "aclnnDequantRopeQuantKvcache"),
        ("qkv_rope_cache", "qkv_rms_norm_rope_cache", "aclnnQkvRmsNormRopeCache")]
    for record in ops.OPERATORS.values():
        assert all(ops.get(name) is record for name in record.names)
    with pytest.raises(KeyError, match="unknown operator"):
        ops.get("rope_grad_v2")


def test_aclnn_names_are_camel_case_and_invertible():
    """The aclnn names of RoPE and NormRopeConcat are the spec names in camelCase; every
    record's are invertible (ApplyRotaryPosEmb's queryRef is the spec's query)."""
    for record in ops.OPERATORS.values():
        for t in record.inputs + record.outputs:
            py, acl = t.name, t.aclnn
            if record.id in ("rope_grad", "rope", "nrc_grad", "nrc"):
                assert acl == re.sub(r"_([a-z])", lambda m: m.group(1).upper(), py)
            assert record.python_name(acl) == py and record.aclnn_name(py) == acl
            assert record.python_name(py) == py


def test_vendor_file_names():
    op = ops.get("norm_rope_concat_backward")
    assert [op.tensor_file(n) for n in ("grad_query_output", "query", "norm_query_mean",
                                       "rope_sin")] == \
        ["gradQueryOutput.bin", "query.bin", "normQueryMean.bin", "ropeSin.bin"]
    assert op.golden_file("grad_query") == "golden_gradQuery.bin"
    assert op.golden_file("grad_norm_query_weight") == "golden_gradNormQueryWeight.bin"
    assert op.tensor_file("grad_query", "npy") == "gradQuery.npy"
    rg = ops.get("rotary_position_embedding_grad")
    assert [rg.tensor_file(n) for n in ("dy", "cos", "sin", "x")] == ["dy.bin", "cos.bin", "sin.bin", "x.bin"]
    assert rg.golden_file("dcos") == "golden_dcos.bin" and rg.tensor_file("dx") == "dx.bin"
    assert rg.python_name("xOptional") == "x" and rg.python_name("dxOut") == "dx"
    assert rg.file_stems("dx") == ["dx", "dxOut"]
    with pytest.raises(KeyError, match="unknown tensor name"):
        op.python_name("gradBogus")


def test_registering_checks_names():
    record = ops.get("rope")
    with pytest.raises(ValueError, match="taken"):
        ops.register(record)
