"""Tensor names: the spec's Python parameter names and the aclnn names of the vendor files.

The vendor test scripts name raw dumps after the aclnn parameters in camelCase (dumps.md):
inputs ``<name>.bin`` (``dy.bin``, ``gradQueryOutput.bin``, ``ropeSin.bin``), goldens
``golden_<output>.bin`` (``golden_dx.bin``, ``golden_gradQuery.bin``) and what a kernel wrote
``<output>.bin``. RotaryPositionEmbeddingGrad's files drop the aclnn suffixes: ``x`` for
``xOptional``, ``dx``/``dcos``/``dsin`` for ``dxOut``/``dcosOut``/``dsinOut`` (accepted as
aliases). Parameter lists follow spec/rope.md §1 and spec/norm_rope_concat.md §2, §3.
"""

from __future__ import annotations

__all__ = ["ACLNN_OPERATORS", "INPUTS", "OUTPUTS", "ALIASES", "aclnn_name", "python_name",
           "input_file", "golden_file", "output_file"]

#: refspec function name -> aclnn operator
ACLNN_OPERATORS = {
    "rotary_position_embedding": "aclnnRotaryPositionEmbedding",
    "rotary_position_embedding_grad": "aclnnRotaryPositionEmbeddingGrad",
    "norm_rope_concat": "aclnnNormRopeConcat",
    "norm_rope_concat_backward": "aclnnNormRopeConcatBackward",
}

_NRC_STREAM_INPUTS = {
    "query": "query", "key": "key",
    "encoder_query": "encoderQuery", "encoder_key": "encoderKey",
}
_NRC_STATS = {
    "norm_query_mean": "normQueryMean", "norm_query_rstd": "normQueryRstd",
    "norm_key_mean": "normKeyMean", "norm_key_rstd": "normKeyRstd",
    "norm_added_query_mean": "normAddedQueryMean", "norm_added_query_rstd": "normAddedQueryRstd",
    "norm_added_key_mean": "normAddedKeyMean", "norm_added_key_rstd": "normAddedKeyRstd",
}
_NRC_WEIGHTS = {
    "norm_query_weight": "normQueryWeight", "norm_key_weight": "normKeyWeight",
    "norm_added_query_weight": "normAddedQueryWeight", "norm_added_key_weight": "normAddedKeyWeight",
}
_NRC_BIASES = {
    "norm_query_bias": "normQueryBias", "norm_key_bias": "normKeyBias",
    "norm_added_query_bias": "normAddedQueryBias", "norm_added_key_bias": "normAddedKeyBias",
}
_ROPE_TABLES = {"rope_sin": "ropeSin", "rope_cos": "ropeCos"}

#: per operator: Python input name -> aclnn name (in the spec's parameter order)
INPUTS = {
    "rotary_position_embedding": {"x": "x", "cos": "cos", "sin": "sin"},
    "rotary_position_embedding_grad": {"dy": "dy", "cos": "cos", "sin": "sin", "x": "x"},
    "norm_rope_concat": {
        "query": "query", "key": "key", "value": "value", "encoder_query": "encoderQuery",
        "encoder_key": "encoderKey", "encoder_value": "encoderValue",
        **{w: a for pair in zip(_NRC_WEIGHTS.items(), _NRC_BIASES.items()) for w, a in pair},
        **_ROPE_TABLES,
    },
    "norm_rope_concat_backward": {
        "grad_query_output": "gradQueryOutput", "grad_key_output": "gradKeyOutput",
        "grad_value_output": "gradValueOutput", **_NRC_STREAM_INPUTS,
        "norm_query_weight": "normQueryWeight", "norm_query_mean": "normQueryMean",
        "norm_query_rstd": "normQueryRstd",
        "norm_key_weight": "normKeyWeight", "norm_key_mean": "normKeyMean",
        "norm_key_rstd": "normKeyRstd",
        "norm_added_query_weight": "normAddedQueryWeight",
        "norm_added_query_mean": "normAddedQueryMean", "norm_added_query_rstd": "normAddedQueryRstd",
        "norm_added_key_weight": "normAddedKeyWeight", "norm_added_key_mean": "normAddedKeyMean",
        "norm_added_key_rstd": "normAddedKeyRstd",
        **_ROPE_TABLES,
    },
}

#: per operator: Python output name -> aclnn name
OUTPUTS = {
    "rotary_position_embedding": {"y": "y"},
    "rotary_position_embedding_grad": {"dx": "dx", "dcos": "dcos", "dsin": "dsin"},
    "norm_rope_concat": {"query_output": "queryOutput", "key_output": "keyOutput",
                         "value_output": "valueOutput", **_NRC_STATS},
    "norm_rope_concat_backward": {
        "grad_query": "gradQuery", "grad_key": "gradKey", "grad_value": "gradValue",
        "grad_encoder_query": "gradEncoderQuery", "grad_encoder_key": "gradEncoderKey",
        "grad_encoder_value": "gradEncoderValue",
        "grad_norm_query_weight": "gradNormQueryWeight", "grad_norm_query_bias": "gradNormQueryBias",
        "grad_norm_key_weight": "gradNormKeyWeight", "grad_norm_key_bias": "gradNormKeyBias",
        "grad_norm_added_query_weight": "gradNormAddedQueryWeight",
        "grad_norm_added_query_bias": "gradNormAddedQueryBias",
        "grad_norm_added_key_weight": "gradNormAddedKeyWeight",
        "grad_norm_added_key_bias": "gradNormAddedKeyBias",
    },
}

#: aclnn parameter spellings the vendor files shorten -> the file stem
ALIASES = {"xOptional": "x", "dxOut": "dx", "dcosOut": "dcos", "dsinOut": "dsin", "yOut": "y"}


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(p[:1].upper() + p[1:] for p in rest)


def _table(op):
    if op is None:
        merged = {}
        for o in ACLNN_OPERATORS:
            merged.update(INPUTS[o])
            merged.update(OUTPUTS[o])
        return merged
    if op not in ACLNN_OPERATORS:
        raise KeyError(f"unknown operator {op!r}; known: {', '.join(ACLNN_OPERATORS)}")
    return {**INPUTS[op], **OUTPUTS[op]}


def aclnn_name(name: str, op: str | None = None) -> str:
    """The aclnn (vendor file) name of a Python tensor name; unknown names are camel-cased."""
    return _table(op).get(name, _camel(name))


def python_name(name: str, op: str | None = None) -> str:
    """The Python tensor name of an aclnn (vendor file) name; accepts Python names unchanged."""
    name = ALIASES.get(name, name)
    table = _table(op)
    if name in table:
        return name
    for py, acl in table.items():
        if acl == name:
            return py
    raise KeyError(f"unknown tensor name {name!r}" + (f" for {op}" if op else ""))


def input_file(name: str, op: str | None = None, ext: str = "bin") -> str:
    """``dy.bin``, ``gradQueryOutput.bin``: the file an input is exported to."""
    return f"{aclnn_name(name, op)}.{ext}"


def golden_file(name: str, op: str | None = None, ext: str = "bin") -> str:
    """``golden_dx.bin``, ``golden_gradQuery.bin``: the file an expected output is exported to."""
    return f"golden_{aclnn_name(name, op)}.{ext}"


def output_file(name: str, op: str | None = None, ext: str = "bin") -> str:
    """``dx.bin``, ``gradQuery.bin``: the file a kernel harness writes an output to."""
    return f"{aclnn_name(name, op)}.{ext}"
