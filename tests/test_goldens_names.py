"""The Python <-> aclnn tensor-name table against the spec functions' signatures."""

import inspect
import re

import pytest

import refspec
from refspec import names

ATTRS = {"mode", "norm_type", "norm_added_type", "rope_type", "concat_order", "eps",
         "is_training", "soc", "out_dtype"}


@pytest.mark.parametrize("op", sorted(names.ACLNN_OPERATORS))
def test_inputs_are_exactly_the_spec_parameters_in_order(op):
    params = [p for p in inspect.signature(getattr(refspec, op)).parameters if p not in ATTRS]
    assert list(names.INPUTS[op]) == params


def test_outputs_are_exactly_the_spec_outputs():
    assert list(names.OUTPUTS["norm_rope_concat"]) == list(refspec.NormRopeConcatOutputs._fields)
    assert list(names.OUTPUTS["norm_rope_concat_backward"]) == list(refspec.NormRopeConcatGrads._fields)
    assert list(names.OUTPUTS["rotary_position_embedding_grad"]) == ["dx", "dcos", "dsin"]
    assert list(names.OUTPUTS["rotary_position_embedding"]) == ["y"]


def test_aclnn_names_are_camel_case_and_invertible():
    for op in names.ACLNN_OPERATORS:
        for py, acl in {**names.INPUTS[op], **names.OUTPUTS[op]}.items():
            assert acl == re.sub(r"_([a-z])", lambda m: m.group(1).upper(), py)
            assert names.python_name(acl, op) == py and names.aclnn_name(py, op) == acl
            assert names.python_name(py, op) == py


def test_vendor_file_names():
    op = "norm_rope_concat_backward"
    assert [names.input_file(n, op) for n in ("grad_query_output", "query", "norm_query_mean",
                                              "rope_sin")] == \
        ["gradQueryOutput.bin", "query.bin", "normQueryMean.bin", "ropeSin.bin"]
    assert names.golden_file("grad_query", op) == "golden_gradQuery.bin"
    assert names.golden_file("grad_norm_query_weight", op) == "golden_gradNormQueryWeight.bin"
    assert names.output_file("grad_query", op, "npy") == "gradQuery.npy"
    rg = "rotary_position_embedding_grad"
    assert [names.input_file(n, rg) for n in ("dy", "cos", "sin", "x")] == \
        ["dy.bin", "cos.bin", "sin.bin", "x.bin"]
    assert names.golden_file("dcos", rg) == "golden_dcos.bin" and names.output_file("dx", rg) == "dx.bin"
    assert names.python_name("xOptional", rg) == "x" and names.python_name("dxOut") == "dx"
    with pytest.raises(KeyError, match="unknown tensor name"):
        names.python_name("gradBogus", op)
