"""Golden files in tests: the smoke sweep written for some operators; every case's metadata
and every dataset's bytes read whole."""

from __future__ import annotations

from click.testing import CliRunner

import refspec.goldens as goldens
from refspec.cli import main


def smoke_golden(folder, *ops: str) -> str:
    """The smoke sweep's cases of ``ops`` (all when none) written into ``folder``; the path."""
    path = folder / "smoke.h5"
    result = CliRunner().invoke(main, ["generate", "-o", str(path)]
                                + [a for op in ops for a in ("--op", op)])
    assert result.exit_code == 0, result.output
    return str(path)


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
