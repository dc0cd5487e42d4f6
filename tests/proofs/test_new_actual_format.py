"""Adding a layout of actual outputs (a kernel harness's own dump layout) takes one source and
one reader entry, with no other change to the package (docs/architecture.md, "Adding an
actual-output format"): a flat folder defined in this file only, ``<case id, '/' as
'__'>.<output>.bin`` and ``.status.json`` beside them, marked by a file ``FLAT``, is judged by
``refspec compare`` like an export directory: the golden's own outputs pass, a changed one
fails naming its element, a missing one is missing."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

import refspec.goldens as goldens
from refspec.comparator.sources.arrays import Problem, open_bin
from refspec.comparator.sources.base import ActualSource, file_names, read_status
from refspec.comparator.sources.opening import READERS, SourceReader, open_source
from cli_helpers import invoke as run


class FlatFolder(ActualSource):
    """Every case's files in one folder."""

    kind = "flat folder"

    def _stem(self, case_id: str) -> str:
        return os.path.join(self.path, case_id.replace("/", "__"))

    def status(self, case_id):
        return read_status(f"{self._stem(case_id)}.status.json")

    def lookup(self, case_id, op, output, dtype, shape):
        for stem in file_names(output, op):
            path = f"{self._stem(case_id)}.{stem}.bin"
            if os.path.exists(path):
                return open_bin(path, dtype, shape, path)
        return Problem("missing", f"no {os.path.basename(self._stem(case_id))}.{output}.bin in "
                                  f"{self.path}")


FLAT = SourceReader("flat folder", lambda path: os.path.isfile(os.path.join(path, "FLAT")),
                    lambda path, mapping: FlatFolder(path))


@pytest.fixture
def flat_layout():
    READERS.insert(0, FLAT)
    yield
    READERS.remove(FLAT)


@pytest.fixture(scope="module")
def golden(tmp_path_factory):
    path = tmp_path_factory.mktemp("layout") / "smoke.h5"
    assert run("generate", "--sweep", "smoke", "--op", "rope_grad", "-o", path).exit_code == 0
    return path


def _write(golden, folder) -> list[tuple[str, str, int]]:
    """The golden's own rounded outputs and statuses in the flat layout; (case, output, bytes
    per element) of each output file."""
    os.makedirs(folder)
    open(os.path.join(folder, "FLAT"), "w").close()
    written = []
    with goldens.open(golden) as gf:
        for cid in gf.case_ids():
            case, stem = gf[cid], os.path.join(folder, cid.replace("/", "__"))
            with open(f"{stem}.status.json", "w") as fh:
                json.dump({"code": case.expected_error or 0}, fh)
            for name in ([] if case.is_negative else case.output_names):
                values = case.expected[name][()]
                values.tofile(f"{stem}.{name}.bin")
                written.append((cid, name, values.dtype.itemsize))
    return written


def test_a_layout_from_outside_is_judged_like_an_export_directory(golden, flat_layout, tmp_path):
    folder = tmp_path / "flat"
    written = _write(golden, folder)
    assert isinstance(open_source(folder), FlatFolder)
    result = run("compare", golden, folder, "--json", tmp_path / "ok.json")
    assert result.exit_code == 0, result.output[-2000:]
    summary = json.loads((tmp_path / "ok.json").read_text())["summary"]
    assert summary["pass"] == summary["outputs"] > len(written) // 2

    cid, name, itemsize = written[3]
    path = f"{folder / cid.replace('/', '__')}.{name}.bin"
    values = np.fromfile(path, np.uint8)
    values[itemsize - 1] ^= 0x80                          # the first element's sign
    values.tofile(path)
    gone = written[7][:2]
    os.remove(f"{folder / gone[0].replace('/', '__')}.{gone[1]}.bin")
    result = run("compare", golden, folder, "--json", tmp_path / "bad.json")
    assert result.exit_code == 1
    rows = {(r["case_id"], r["output"]): r
            for r in json.loads((tmp_path / "bad.json").read_text())["results"]}
    assert rows[(cid, name)]["status"] == "fail" and rows[(cid, name)]["worst"][0]["flat_index"] == 0
    assert rows[gone]["status"] == "missing"


def test_without_it_the_folder_is_a_tree_with_no_case_folders(golden, tmp_path):
    folder = tmp_path / "flat"
    _write(golden, folder)
    assert not isinstance(open_source(folder), FlatFolder)
    assert run("compare", golden, folder).exit_code == 1
