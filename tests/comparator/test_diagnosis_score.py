"""The diagnosis's score on the corpus of broken kernels (docs/compare.md, "How well the
diagnosis does"; tests/impls/diagnosis_corpus.py): it may rise, never fall. The floors are the
published score, measured with benchmarks/bench_diagnosis.py on the smoke sweep."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from golden_files import smoke_golden

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "impls"))

import diagnosis_corpus as corpus  # noqa: E402  (tests/impls/diagnosis_corpus.py)

#: the published score (docs/compare.md, measured 0.964, 0.000 and 0): failing outputs of the
#: broken kernels whose first finding names the mistake, failing outputs with no finding at all,
#: and the correct kernels' failing outputs with a finding that claims a logic error
NAMED_FIRST_AT_LEAST = 0.96
EMPTY_AT_MOST = 0.0
FALSE_BUGS_AT_MOST = 0


@pytest.mark.slow
def test_the_corpus_score_does_not_fall(tmp_path):
    score = corpus.score(smoke_golden(tmp_path))
    assert not score.silent_kernels                  # every broken kernel fails something
    assert len(score.broken()) > 1000 and score.correct()
    assert score.false_bugs <= FALSE_BUGS_AT_MOST, [r for r in score.correct() if r.false_bug]
    assert score.named >= NAMED_FIRST_AT_LEAST, score.named
    assert score.empty <= EMPTY_AT_MOST, score.empty
