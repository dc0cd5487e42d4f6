"""The vendor's own UT data for NormRopeConcatBackward, read as a golden case
(docs/vendor_ut.md).

The vendor's kernel unit test (ops-transformer,
``posembedding/norm_rope_concat_grad/tests/ut/op_kernel``) runs
``norm_rope_concat_grad_data/gen_data.py B N D Sq+Seq Sk+Sek Sq Sk Sr DTYPE TILINGKEY`` with
``TILINGKEY = normType*10^8 + normAddedType*10^5 + ropeType*100 + concatOrder*10``. The script
writes into its folder, with ``ndarray.tofile`` (raw, little-endian, C order), one file per
aclnn input: the gradients ``gradQueryOutput``/``gradKeyOutput``/``gradValueOutput`` in BNSD,
``query``/``key``/``encoderQuery``/``encoderKey`` in BSND, every weight (D), every mean and
rstd in float32 (B, S, N, 1), ``ropeSin``/``ropeCos`` (Sr, D), 0-byte files for the encoder
streams when Seq or Sek is 0, and its goldens ``golden_<output>.bin``.

Those arguments are not in the files, so they are given as they were on the script's command
line. The case's tensors, their shapes and dtypes, and which ones the attributes need, come
from the operator's record (its ``plan`` for these sizes); files the attributes do not need
(weights of a norm of type 1, statistics without a norm, the encoder files of length 0) are
left alone.
"""

from __future__ import annotations

import os
import shlex

from .. import ops
from ..goldens.format import OutsideError, inside
from ..spec.dtypes import resolve_dtype
from .tensor_files import TensorFileError, bin_spec, read_tensor
from .user_cases import InputError, UserCase

__all__ = ["UT_ARGS", "OPERATOR", "parse_ut_args", "describe_vendor_ut"]

#: the operator whose UT data this reads (its aclnn name)
OPERATOR = "aclnnNormRopeConcatBackward"
#: gen_data.py's command-line arguments, in order
UT_ARGS = ("B", "N", "D", "Sq+Seq", "Sk+Sek", "Sq", "Sk", "Sr", "dtype", "tilingKey")
_DTYPES = ("float32", "float16", "bfloat16")


def parse_ut_args(args) -> dict:
    """gen_data.py's arguments (a string as on its command line, or a list) -> the case's
    parameters in the record's vocabulary (B, N, Sq, Sk, Seq, Sek, D, Sr, dtype and the four
    attributes decoded from the tiling key)."""
    values = shlex.split(args) if isinstance(args, str) else [str(a) for a in args]
    usage = f"give gen_data.py's {len(UT_ARGS)} arguments {' '.join(UT_ARGS)}, e.g. " \
            "\"2 32 64 20 40 4 8 8 float32 10\""
    if len(values) != len(UT_ARGS):
        raise InputError(f"vendor UT arguments {' '.join(values)!r}: {len(values)} values; {usage}")
    sizes = {}
    for name, v in zip(UT_ARGS[:8], values[:8]):
        if not v.isdigit():
            raise InputError(f"vendor UT argument {name} = {v!r} must be a whole number; {usage}")
        sizes[name] = int(v)
    dtype = values[8]
    if dtype not in _DTYPES:
        raise InputError(f"vendor UT argument dtype = {dtype!r}: gen_data.py takes "
                         f"{', '.join(_DTYPES)}")
    if not values[9].isdigit():
        raise InputError(f"vendor UT argument tilingKey = {values[9]!r} must be a whole number")
    key = int(values[9])
    seq, sek = sizes["Sq+Seq"] - sizes["Sq"], sizes["Sk+Sek"] - sizes["Sk"]
    if seq < 0 or sek < 0:
        raise InputError(f"vendor UT arguments: Sq+Seq = {sizes['Sq+Seq']} and Sk+Sek = "
                         f"{sizes['Sk+Sek']} must be at least Sq = {sizes['Sq']} and Sk = "
                         f"{sizes['Sk']}")
    return {"norm_type": key // 100000000, "norm_added_type": key % 100000000 // 100000,
            "rope_type": key % 100000 // 100, "concat_order": key % 100 // 10,
            "dtype": dtype, "B": sizes["B"], "N": sizes["N"], "Sq": sizes["Sq"],
            "Sk": sizes["Sk"], "Seq": seq, "Sek": sek, "D": sizes["D"], "Sr": sizes["Sr"],
            "tiling_key": key}


def describe_vendor_ut(folder, args, soc: str | None = "A2") -> UserCase:
    """The case of a folder gen_data.py wrote with ``args`` (InputError naming the folder and
    the file for a missing file or a wrong byte size)."""
    folder = os.fspath(folder)
    if not os.path.isdir(folder):
        raise InputError(f"{folder}: not a directory (the folder gen_data.py wrote into)")
    op = ops.get(OPERATOR)
    p = parse_ut_args(args)
    shape = {k: p[k] for k in op.sweep.shape.keys}
    params = {"op": op.id, **op.axis_values({k: p[k] for k in op.attributes}),
              "dtype": p["dtype"], "soc": soc, "dist": "vendor-ut", "fault": "none", **shape,
              "tiling_key": p["tiling_key"],
              "vendor_ut_args": " ".join(shlex.quote(str(a)) for a in (
                  shlex.split(args) if isinstance(args, str) else args))}
    specs = {}
    for name, plan in op.generation.plan(params).items():
        try:
            path = os.path.join(folder, op.tensor_file(name))
            inside(folder, op.tensor_file(name))
        except OutsideError as exc:
            raise InputError(f"{folder}: {op.tensor_file(name)}: refused: {exc}") from None
        if not os.path.isfile(path):
            raise InputError(f"{folder}: {op.tensor_file(name)}: missing; gen_data.py writes it and "
                             f"these arguments need it ({plan.shape} {resolve_dtype(plan.dtype)})")
        try:
            specs[name] = bin_spec(path, plan.dtype, plan.shape)
        except TensorFileError as exc:
            raise InputError(f"{exc} (from the vendor UT arguments {params['vendor_ut_args']})") \
                from None
    label = op.sweep.shape.label(shape)
    case_id = f"{op.id}/vendor-ut/tiling={p['tiling_key']}/dtype={p['dtype']}/{label}"
    regenerate = (f"refspec golden --vendor-ut {shlex.quote(folder)} --ut-args "
                  f"{shlex.quote(params['vendor_ut_args'])} -o OUT.h5")
    return UserCase(where=folder, case_id=case_id, op=op, params=params,
                    load=lambda: {k: read_tensor(s) for k, s in specs.items()},
                    regenerate=regenerate)
