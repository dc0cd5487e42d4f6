"""Paths of the repository's own files that tests read (docs, README, manifest, CI script)."""

from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DOCS = REPO / "docs"
README = REPO / "README.md"
MANIFEST = REPO / "goldens" / "smoke.manifest.json"
CI = REPO / ".ci" / "run"
TESTS = REPO / "tests"
