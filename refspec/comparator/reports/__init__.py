"""How the verdicts are shown (docs/compare.md, "Reports"): the ``Report`` of a comparison and
its renderers (terminal, JSON, JUnit, HTML), each failing output's detail in one order
(``detail``)."""
