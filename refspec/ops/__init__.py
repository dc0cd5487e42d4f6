"""Operator records: one ``refspec.ops.record.Operator`` per operator, the layer between
the spec and everything that makes or judges golden data (docs/architecture.md).

    op = refspec.ops.get("rope_grad")          # or "rotary_position_embedding_grad",
                                               # or "aclnnRotaryPositionEmbeddingGrad"
    op.input_file("grad_query_output")         # vendor file names, sampling, the spec call ...

``register`` adds an operator (its record and a sweep are all it takes); the built-in
records are those of ``refspec.ops.rope_records`` and ``refspec.ops.nrc_records``.
"""

from __future__ import annotations

from .apply_rope_records import APPLY_ROPE, APPLY_ROPE_V2
from .dequant_rope_records import DEQUANT_ROPE_KV
from .interleave_rope_records import INTERLEAVE_ROPE
from .kv_cache_records import KV_ROPE_CACHE, KV_ROPE_CACHE_V2
from .nrc_records import NRC, NRC_GRAD
from .qkv_cache_records import QKV_ROPE_CACHE
from .record import (Autograd, Operator, Output, SweepAxes, Tensor, TensorPlan, camel_case,
                     check_names)
from .rope_cache_records import ROPE_CACHE
from .rope_records import ROPE, ROPE_GRAD

__all__ = ["Operator", "Tensor", "Output", "TensorPlan", "SweepAxes", "Autograd", "camel_case", "OPERATORS",
           "get", "ids", "find", "register", "unregister"]

#: the registered operators by short id, in registration order
OPERATORS: dict[str, Operator] = {}


def register(op: Operator) -> Operator:
    """Add an operator record (its names must be new); returns it."""
    check_names(op)
    for other in OPERATORS.values():
        clash = set(op.names) & set(other.names)
        if clash:
            raise ValueError(f"operator {op.id!r}: name {sorted(clash)[0]!r} is taken by {other.id!r}")
    OPERATORS[op.id] = op
    return op


def unregister(op_id: str) -> None:
    """Remove a registered operator (tests that add their own use this to clean up)."""
    OPERATORS.pop(op_id, None)


def ids() -> tuple[str, ...]:
    """The short ids of the registered operators."""
    return tuple(OPERATORS)


def find(name) -> Operator | None:
    """The operator with this short id, spec function name or aclnn name, or None."""
    for op in OPERATORS.values():
        if name in op.names:
            return op
    return None


def get(name) -> Operator:
    """The operator with this short id, spec function name or aclnn name (KeyError otherwise)."""
    op = find(name)
    if op is None:
        raise KeyError(f"unknown operator {name!r}; known: {', '.join(OPERATORS)}")
    return op


for _op in (ROPE_GRAD, ROPE, NRC_GRAD, NRC, APPLY_ROPE, APPLY_ROPE_V2, ROPE_CACHE,
            INTERLEAVE_ROPE, KV_ROPE_CACHE, KV_ROPE_CACHE_V2, DEQUANT_ROPE_KV, QKV_ROPE_CACHE):
    register(_op)
