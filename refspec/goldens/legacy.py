"""Golden files of schema 1, read as schema 2 (docs/goldens.md, "Schema versions").

Schema 1 differs from schema 2 in three ways, each undone here when such a file is read:

- its index names a case's operator by its spec function (``rotary_position_embedding_grad``),
  schema 2 by its record id (``rope_grad``);
- its parameters use other names for some axes (``cos_pattern``, ``distribution``,
  ``is_training``, RoPE's ``mode`` as a number beside ``mode_name``), which each record's axes
  name (``Operator.upgrade_params``);
- it stores the sums of absolute terms of reductions only; the elementwise float32 and float64
  outputs' sums are computed here, on first use, by the record's tolerance terms (the one
  place that makes them for generated cases too).

Its case groups and datasets also carry their metadata as HDF5 attributes; a case whose index
row lacks ``meta`` (files older than the index's ``/summary``) is described from them.
"""

from __future__ import annotations

import json

import h5py
import numpy as np

from .. import ops
from ..spec.terms import ELEMENTWISE, needs_elementwise_sum_abs
from .format import CASE_SUBGROUPS, attr_value, read_attrs
from .index import Row

__all__ = ["upgrade_row", "meta_of_group", "row_of_group", "with_sums"]


def meta_of_group(group: h5py.Group) -> dict:
    """The index ``meta`` of a schema-1 case, read from its group's attributes."""
    a = read_attrs(group)
    code = int(a.get("expected_error_code", 0))
    error = [code, a.get("expected_error_status"), a.get("expected_error_message")] if code else None
    arrays = {}
    for sub in CASE_SUBGROUPS:
        if sub in group:
            arrays[sub] = {name: {**read_attrs(ds), "shape": list(ds.shape)}
                           for name, ds in group[sub].items()}
    return {"params": json.loads(a.get("params", "{}")), "seed": int(a.get("seed", 0)),
            "error": error, "regenerate": a.get("regenerate", ""), "arrays": arrays}


def row_of_group(case_id: str, group: h5py.Group) -> Row:
    """The index row of a schema-1 case read from its group (attributes and datasets)."""
    meta = meta_of_group(group)
    dtype = meta["params"].get("dtype")
    data = stored = 0
    for sub in CASE_SUBGROUPS:
        for name, ds in (group[sub].items() if sub in group else ()):
            if dtype is None and sub == "inputs":
                dtype = attr_value(ds.attrs.get("dtype"))
            data += int(np.prod(ds.shape, dtype=np.int64)) * ds.dtype.itemsize
            stored += int(ds.id.get_storage_size())
    a = group.attrs
    return Row(case_id, attr_value(a.get("op", "")), str(dtype), attr_value(a.get("soc", "")) or "",
               meta["error"] is not None, data, stored, json.dumps(meta))


def upgrade_row(case_id: str, row: Row | None, open_group) -> Row:
    """A schema-1 index row (None or without ``meta``: read from the case's group) as schema
    2 writes it: the operator's record id, the parameters under the axes' names."""
    if row is None or not row.meta:
        row = row_of_group(case_id, open_group())
    record = ops.find(row.op)
    if record is None:
        return row
    meta = json.loads(row.meta)
    meta["params"] = {**record.upgrade_params(meta["params"]), "op": record.id}
    return row._replace(op=record.id, meta=json.dumps(meta))


def with_sums(case):
    """A schema-1 case with the sums of absolute terms of its elementwise float32 and float64
    outputs, computed when first read (``refspec.ops.record.Generation.terms``)."""
    record = ops.find(case.op)
    if record is None or case.is_negative:
        return case
    missing = [n for n in case.output_names if n not in case.sum_abs
               and case.output_meta(n)["comparison_class"] == ELEMENTWISE
               and needs_elementwise_sum_abs(case.expected[n].dtype)]
    if not missing:
        return case
    terms: dict = {}

    def computed(name):
        def compute():
            if not terms:
                terms.update(record.generation.terms(record.call_of(case.params,
                                                                    case.input_arrays())))
            return np.asarray(terms[name].sum_abs, dtype=np.float64)
        return compute

    described = case.meta.get("arrays", {}).get("sum_abs", {})
    case.sum_abs = type(case.sum_abs)(described, case._opener("sum_abs"), f"{case.case_id}/sum_abs",
                                      {n: computed(n) for n in missing}, case._source)
    return case
