"""Reading golden files whole in tests: every case's metadata and every dataset's bytes."""

from __future__ import annotations

import refspec.goldens as goldens


def case_content(case) -> dict:
    """Everything a case holds: its metadata and every dataset's bytes, dtype, shape, attrs."""
    out = {"meta": case.meta}
    for group in ("inputs", "expected", "exact", "sum_abs"):
        arrays = getattr(case, group)
        for name in arrays:
            a = arrays[name].read()
            out[f"{group}/{name}"] = (a.dtype.str, a.shape, a.tobytes(), dict(arrays[name].attrs))
    return out


def file_content(path) -> dict:
    """{case id: case_content} in file order."""
    with goldens.open(path) as gf:
        return {cid: case_content(gf[cid]) for cid in gf.case_ids()}
