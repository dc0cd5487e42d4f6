"""Why a failing output failed (docs/compare.md, "Diagnosis"): the findings of one output, asked
in order, and the patterns across cases. Uses the judging's element checks to say whether a
candidate explains the kernel's values; never imports the reports."""
