"""The comparator: judge a kernel's outputs against golden cases (docs/compare.md).

    report = refspec.compare("smoke.h5", "kernel_out/", standard="default")
    print(report)                     # the terminal table and the one-line total
    report.passed, report.exit_code   # True/False, 0/1
    report.to_dict()                  # everything, JSON-ready

Metrics are float64 against the exact golden, streamed in blocks; standards are data
(``refspec.comparator.standards``); input problems are per-output statuses.
"""

from .mapping import Mapping, MappingError, load_mapping
from .report import OutputResult, Report
from .run import CompareUsageError, compare, open_source
from .memory_case import MemoryCase, spec_case
from .standards import STANDARD_NAMES, STANDARDS, resolve_rule

__all__ = ["compare", "Report", "OutputResult", "CompareUsageError", "STANDARDS", "STANDARD_NAMES",
           "resolve_rule", "open_source", "Mapping", "MappingError", "load_mapping", "MemoryCase",
           "spec_case"]
