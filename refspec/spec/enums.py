"""Attribute enums with the documented numbers (Parameters in docs/rope.md and
docs/norm_rope_concat.md)."""

from __future__ import annotations

from enum import IntEnum

__all__ = ["RopeMode", "NormType", "RopeType", "ConcatOrder", "SOCS"]


class RopeMode(IntEnum):
    """``mode`` of RotaryPositionEmbedding(+Grad)."""

    HALF = 0
    INTERLEAVE = 1
    QUARTER = 2
    INTERLEAVE_HALF = 3

    @property
    def label(self) -> str:
        return self.name.lower().replace("_", "-")


class NormType(IntEnum):
    """``normType`` / ``normAddedType`` of NormRopeConcat(+Backward)."""

    NONE = 0
    LAYER_NORM = 1
    AFFINE_LAYER_NORM = 2


class RopeType(IntEnum):
    """``ropeType`` of NormRopeConcat(+Backward). Not RopeMode's numbering: here half is 2."""

    NONE = 0
    INTERLEAVE = 1
    HALF = 2


class ConcatOrder(IntEnum):
    """``concatOrder``: 0 gives [stream, encoder stream], 1 gives [encoder stream, stream]."""

    STREAM_FIRST = 0
    ENCODER_FIRST = 1


#: Chip profiles (docs/api.md): A2 and A3 share every rule; 950 is the arch35 family.
SOCS = ("A2", "A3", "950")
