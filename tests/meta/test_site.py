"""The documentation site reads from disk: built with `mkdocs build --strict`, its pages link to
page files (``compare.html``), never to folders, which a browser opening ``site/index.html``
from ``file://`` would show as directory listings; and its code blocks wrap long lines."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from repo_paths import REPO

pytest.importorskip("mkdocs")
pytest.importorskip("material")


@pytest.mark.slow
def test_the_built_site_works_from_disk(tmp_path):
    site = tmp_path / "site"
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir",
                           str(site)], cwd=REPO, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    pages = [p for p in sorted(site.rglob("*.html")) if p.name != "404.html"]   # servers only
    assert len(pages) > 15
    broken = []
    for page in pages:
        for link in re.findall(r'href="([^"#?]+)(?:[#?][^"]*)?"', page.read_text(encoding="utf-8")):
            if link.startswith(("http://", "https://", "mailto:", "data:")):
                continue
            target = (page.parent / link).resolve()
            if link.endswith("/") or not target.is_file():
                broken.append(f"{page.relative_to(site)} -> {link}")
    assert not broken, broken[:10]
    css = [Path(site, link) for link in re.findall(r'href="([^"]+\.css)"',
                                                   (site / "index.html").read_text())]
    assert any(re.search(r"pre\s*>\s*code\s*\{[^}]*white-space:\s*pre-wrap", c.read_text())
               for c in css if c.is_file())
