"""The documentation site reads from disk: built with `mkdocs build --strict`, its pages link to
page files (``compare.html``), never to folders, which a browser opening ``site/index.html``
from ``file://`` would show as directory listings; its code blocks wrap long lines; and in a real
browser (headless Chromium through Playwright, every page opened from ``file://``, every request
to another host blocked) each formula of each page is typeset as mathematics by the KaTeX the site
ships.

The browser test keeps a screenshot of an operator page for a person to look at: it writes
``rope.png`` to the folder ``$REFSPEC_SITE_SCREENSHOTS`` names, or else to the test's pytest
``tmp_path`` (pytest keeps the last three runs' under ``/tmp/pytest-of-$USER/``), and prints its
path (shown with ``pytest -s`` or ``-rP``)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from browser import launch, needs_chromium
from repo_paths import DOCS, REPO

pytest.importorskip("mkdocs")
pytest.importorskip("material")

# The operator pages: each states its formulas (so each must show some).
FORMULA_PAGES = ("rope", "norm_rope_concat", "apply_rotary_pos_emb", "rope_with_sin_cos_cache",
                 "interleave_rope", "kv_rms_norm_rope_cache", "dequant_rope_quant_kvcache",
                 "qkv_rms_norm_rope_cache", "errata")


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    site = tmp_path_factory.mktemp("site") / "site"
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir",
                           str(site)], cwd=REPO, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    return site


def _pages(site):
    return [p for p in sorted(site.rglob("*.html")) if p.name != "404.html"]   # servers only


@pytest.mark.slow
def test_the_built_site_works_from_disk(site):
    pages = _pages(site)
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


def formulas_in_source(markdown: str) -> int:
    """How many formulas a page's Markdown writes: each ``$$`` block (the two ``$$`` on lines of
    their own) and each inline ``$...$`` (no space just inside the dollars), outside fenced code
    blocks and code spans."""
    text = re.sub(r"^ *(```|~~~).*?^ *\1", "", markdown, flags=re.S | re.M)
    text = re.sub(r"(`+).+?\1", "", text, flags=re.S)
    blocks = re.findall(r"^ *\$\$ *\n.*?^ *\$\$ *$", text, flags=re.S | re.M)
    text = re.sub(r"^ *\$\$ *\n.*?^ *\$\$ *$", "", text, flags=re.S | re.M)
    inline = re.findall(r"(?<![\\$])\$(?![\s$])(?:\\.|[^\\$])+?(?<![\s\\])\$", text)
    return len(blocks) + len(inline)


def test_formulas_in_source_counts_blocks_and_inline_formulas():
    page = ("Text $a_i$ and `$not$` and $b$.\n\n$$\nx = y\n$$\n\n```python\nc = '$z$'\n```\n"
            "| $\\lvert x\\rvert$ | 5 \\$ |\n")
    assert formulas_in_source(page) == 4


# Run in each page: what the reader sees. Text outside code and formulas (all of it, and the
# pages' own prose without the docstrings of the API reference, which write their formulas as
# plain text or code), every <em> with the characters around it, and each formula's state.
_INSPECT = """async () => {
  await document.fonts.ready;
  const article = document.querySelector("article") || document.body;
  const skip = "code, pre, script, style, .arithmatex";
  const texts = [], prose = [];
  const walker = document.createTreeWalker(article, NodeFilter.SHOW_TEXT);
  for (let n = walker.nextNode(); n; n = walker.nextNode()) {
    if (n.parentElement.closest(skip)) continue;
    texts.push(n.textContent);
    if (!n.parentElement.closest(".doc")) prose.push(n.textContent);   // not a docstring
  }
  const side = (node, last) => {
    const t = node ? node.textContent : "";
    return last ? t.slice(-1) : t.slice(0, 1);
  };
  const ems = [...article.querySelectorAll("em")].filter(e => !e.closest(skip)).map(e => ({
    before: side(e.previousSibling, true), text: e.textContent, after: side(e.nextSibling, false),
  }));
  const formulas = [...article.querySelectorAll(".arithmatex")];
  const fonts = {};
  for (const face of document.fonts) {
    if (face.family.replace(/"/g, "").startsWith("KaTeX")) {
      fonts[face.status] = (fonts[face.status] || []).concat(face.family);
    }
  }
  return {
    text: texts.join(" "),
    prose: prose.join(" "),
    ems,
    formulas: formulas.length,
    typeset: formulas.filter(f => f.querySelector(".katex")).length,
    source_left: formulas.filter(f => /\\\\[()\\[\\]]/.test(f.textContent)
                                      && !f.querySelector(".katex")).map(f => f.textContent),
    errors: [...document.querySelectorAll(".katex-error, mjx-merror")].map(e => e.textContent),
    em_in_formula: formulas.filter(f => f.querySelector("em")).length,
    fonts,
  };
}"""

# Signs of a formula written as plain text: a product with a star, a power with a caret, a
# subscript in braces, a square root called like a function.
PLAIN_FORMULA = re.compile(r"[\w)\]]\s?\*\s?[\w(|]|[\w)]\^[-\w({]|_\{|\bsqrt\(")


def _screenshot_folder(tmp_path) -> Path:
    folder = Path(os.environ.get("REFSPEC_SITE_SCREENSHOTS") or tmp_path)
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@pytest.mark.slow
@needs_chromium
def test_every_formula_is_typeset_in_a_browser_from_disk(site, tmp_path):
    """Every page, opened from file:// with every request to another host blocked (and the test
    failing if a page tries one): no formula delimiter (``$``, ``\\(``, ``\\[``) left in the text
    outside code, no formula left as plain text (``x*cos``, ``2^-8``, ``q_{i}``), no emphasis
    glued to a word (a ``*`` or ``_`` of a formula taken as Markdown emphasis), every formula
    typeset by KaTeX with no error node and no <em> inside, as many typeset formulas as the
    page's Markdown writes, and the KaTeX fonts loaded from the site itself."""
    from playwright.sync_api import sync_playwright

    blocked, failed, scripts, problems, counts = [], [], [], {}, {}

    def route(r):
        if r.request.url.startswith("file://"):
            r.continue_()
        else:
            blocked.append(r.request.url)
            r.abort()

    with sync_playwright() as p:
        browser = launch(p)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.route("**/*", route)
            # a request cut short by the next page's navigation (net::ERR_ABORTED) is no fault
            page.on("requestfailed", lambda r: r.url.startswith("file://")
                    and "ERR_ABORTED" not in (r.failure or "") and failed.append(r.url))
            page.on("pageerror", lambda e: scripts.append(f"{page.url}: {e}"))
            for html in _pages(site):
                name = html.relative_to(site).with_suffix("").as_posix()
                page.goto(html.as_uri())
                seen = page.evaluate(_INSPECT)
                seen["text"] = " ".join(seen["text"].split())
                seen["prose"] = " ".join(seen["prose"].split())
                source = DOCS / f"{name}.md"
                expected = formulas_in_source(source.read_text(encoding="utf-8"))
                counts[name] = seen["typeset"]
                wrong = []
                for sign in ("$", "\\(", "\\)", "\\[", "\\]"):
                    if sign in seen["text"]:
                        at = seen["text"].index(sign)
                        wrong.append(f"{sign!r} in the text: ...{seen['text'][at - 40:at + 40]}...")
                wrong += [f"plain formula: ...{seen['prose'][max(m.start() - 30, 0):m.end() + 30]}..."
                          for m in PLAIN_FORMULA.finditer(seen["prose"])]
                wrong += [f"emphasis glued to a word: {e['before']}<em>{e['text']}</em>{e['after']}"
                          for e in seen["ems"] if re.match(r"[\w)\]}]", e["before"])
                          or re.match(r"[\w({\[]", e["after"])]
                if seen["typeset"] != seen["formulas"] or seen["source_left"]:
                    wrong.append(f"{seen['formulas'] - seen['typeset']} formulas not typeset: "
                                 f"{seen['source_left'][:3]}")
                if seen["formulas"] != expected:
                    wrong.append(f"{seen['formulas']} formulas on the page, {expected} in {source.name}")
                wrong += [f"KaTeX error: {e}" for e in seen["errors"]]
                if seen["em_in_formula"]:
                    wrong.append(f"<em> inside {seen['em_in_formula']} formulas")
                if seen["formulas"] and ("KaTeX_Main" not in str(seen["fonts"].get("loaded"))
                                         or seen["fonts"].get("error")):
                    wrong.append(f"KaTeX fonts: {seen['fonts']}")
                if wrong:
                    problems[name] = wrong
                if name == "rope":
                    page.evaluate("document.getElementById('2-forward-per-mode').scrollIntoView(); "
                                  "window.scrollBy(0, -70)")
                    shot = _screenshot_folder(tmp_path) / "rope.png"
                    page.screenshot(path=str(shot))
                    print(f"\nscreenshot of rope.html: {shot}")
        finally:
            browser.close()
    faults = [f"{name}: {line}" for name, lines in problems.items() for line in lines[:8]]
    faults += [f"asked the network for {url}" for url in sorted(set(blocked))[:10]]
    faults += [f"asked for a file the site lacks: {url}" for url in sorted(set(failed))[:10]]
    faults += [f"script error: {error}" for error in scripts[:5]]
    faults += [f"{name}: no formula" for name in FORMULA_PAGES if not counts.get(name)]
    assert not faults, "\n".join(faults)
