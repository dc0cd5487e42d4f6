"""goldens/smoke.manifest.json pins the smoke sweep bit for bit: regenerate it and compare.

An intended change to the spec, the distributions or the smoke sweep shows up here; rebuild the
manifest with ``python -m refspec.goldens.manifest`` and commit it with the change (goldens/README.md).
"""

from __future__ import annotations

import json

import pytest

from refspec.goldens.engine import Run, generate
from refspec.goldens.manifest import compare, file_manifest, memory_manifest
from refspec.goldens.sweep import load_sweep

from repo_paths import MANIFEST


@pytest.fixture(scope="module")
def pinned():
    with open(MANIFEST, encoding="utf-8") as fh:
        return json.load(fh)


def test_manifest_lists_every_smoke_case(pinned):
    sweep = load_sweep("smoke")
    assert pinned["sweep"] == "smoke" and pinned["tier"] == sweep.default_tier
    assert pinned["sweep_seed"] == sweep.seed
    assert list(pinned["cases"]) == [c.id for c in sweep.cases()]
    for entry in pinned["cases"].values():
        assert entry["datasets"] and all(v.count(" ") == 2 and len(v.split()[2]) == 64
                                         for v in entry["datasets"].values())


def test_regenerated_smoke_matches_every_digest(pinned):
    diffs = compare(pinned, memory_manifest("smoke"))
    assert not diffs, "\n".join(diffs[:20]) + "\n(rebuild with: python -m refspec.goldens.manifest)"


def test_digests_of_the_written_file_equal_the_in_memory_ones(pinned, tmp_path):
    sweep = load_sweep("smoke")
    some = sweep.cases()[::17]
    out = tmp_path / "some.h5"
    generate(Run.of(sweep, compression="gzip"), some, out)
    from_file = file_manifest(out)["cases"]
    assert list(from_file) == [c.id for c in some]
    for cid, entry in from_file.items():
        assert entry == pinned["cases"][cid], cid


def test_compare_reports_changes(pinned):
    changed = json.loads(json.dumps(pinned))
    cid = next(iter(changed["cases"]))
    name = next(iter(changed["cases"][cid]["datasets"]))
    old = changed["cases"][cid]["datasets"][name]
    changed["cases"][cid]["datasets"][name] = old[:-1] + ("1" if old[-1] == "0" else "0")
    del changed["cases"][list(changed["cases"])[-1]]
    diffs = compare(pinned, changed)
    assert any(d.startswith(f"{cid}: {name}:") for d in diffs)
    assert any(d.startswith("missing case") for d in diffs)
