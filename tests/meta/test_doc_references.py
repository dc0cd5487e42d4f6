"""The docs stand alone: every file, page and section they (and the package's docstrings) point
at exists in this repository, and no page sends the reader to a document outside it."""

import re

import pytest

from repo_paths import DOCS, README, REPO

PAGES = sorted(DOCS.glob("*.md")) + [README, REPO / "benchmarks" / "README.md",
                                      REPO / "goldens" / "README.md"]
SOURCES = sorted((REPO / "refspec").rglob("*.py"))
TESTS = sorted((REPO / "tests").rglob("*.py"))
PATH = re.compile(r"(?<![\w./-])((?:refspec|tests|benchmarks|goldens|docs|\.ci)/[\w/.=-]*\w)")
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")
SECTION = re.compile(r"(docs/\w+\.md) §(\d+)")


def _rel(page):
    return page.relative_to(REPO).as_posix()


@pytest.mark.parametrize("page", PAGES, ids=_rel)
def test_paths_named_in_a_page_exist(page):
    text = page.read_text(encoding="utf-8")
    missing = []
    for path in set(PATH.findall(text)):
        if any(ch in path for ch in "*<>") or path.startswith("tests/") and "::" in path:
            continue
        if not (REPO / path).exists() and not (REPO / path.split("::")[0]).exists():
            missing.append(path)
    assert not missing, f"{_rel(page)} names files that do not exist: {sorted(missing)}"


@pytest.mark.parametrize("page", PAGES, ids=_rel)
def test_links_of_a_page_resolve(page):
    text = page.read_text(encoding="utf-8")
    broken = [link for link in LINK.findall(text)
              if not link.startswith(("http://", "https://"))
              and not (page.parent / link).exists()]
    assert not broken, f"{_rel(page)} links to missing files: {broken}"


@pytest.mark.parametrize("page", PAGES, ids=_rel)
def test_no_page_cites_the_source_documents_by_their_outside_paths(page):
    """Facts from the vendor documents are restated in docs/ with the source named; a page may
    not send the reader to a file that is not part of the repository."""
    text = page.read_text(encoding="utf-8")
    assert not re.search(r"(?<![\w/])spec/\w+\.md|specification pack|\.\./shared", text), _rel(page)


def _sections(page: str) -> set[str]:
    text = (REPO / page).read_text(encoding="utf-8")
    return set(re.findall(r"^## (\d+)\. ", text, flags=re.M))


def test_docstrings_cite_existing_sections():
    cited = []
    for source in SOURCES:
        text = source.read_text(encoding="utf-8")
        assert not re.search(r"(?<![\w/])spec/\w+\.md", text), f"{_rel(source)} cites an outside file"
        for page, number in SECTION.findall(text):
            cited.append((page, number))
            assert (REPO / page).exists(), f"{_rel(source)} cites {page}, which does not exist"
            assert number in _sections(page), f"{_rel(source)} cites {page} §{number}: no such section"
    assert len(cited) >= 15


@pytest.mark.parametrize("source", TESTS, ids=_rel)
def test_tests_cite_only_the_repository(source):
    text = source.read_text(encoding="utf-8")
    assert not re.search(r"(?<![\w/])spec/\w+\.md|\bspec[ ]pack", text), f"{_rel(source)} cites an outside file"


COMPARATOR_NAME = re.compile(r"(?<![\w/.])(refspec\.compar(?:e|ator)(?:\.[A-Za-z_]\w*)+)")


def _resolves(dotted: str) -> bool:
    """A module, or an attribute of the longest module the name starts with."""
    import importlib
    parts = dotted.split(".")
    for k in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:k]))
        except ImportError:
            continue
        for part in parts[k:]:
            if not hasattr(obj, part):
                return False
            obj = getattr(obj, part)
        return True
    return False


def test_the_comparator_names_cited_exist():
    """Every dotted name of the comparator (``refspec.comparator.judging.bounds.badness``; and
    of ``refspec.compare``, its old name) that the package's docstrings, the tests and the pages
    cite is a module or an attribute of one: no name of a module that was renamed or moved stays
    behind (docs/api.md's table of former names aside)."""
    pages = [p for p in PAGES if p.name != "api.md"] + sorted((DOCS / "reference").glob("*.md"))
    stale = {f"{_rel(path)}: {name}" for path in SOURCES + TESTS + pages
             for name in COMPARATOR_NAME.findall(path.read_text(encoding="utf-8"))
             if not _resolves(name.rstrip("."))}
    assert not stale, sorted(stale)
