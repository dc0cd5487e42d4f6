"""The comparator: judge a kernel's outputs against golden cases (docs/compare.md).

    report = refspec.compare("smoke.h5", "kernel_out/", standard="default")
    print(report)                     # the terminal table and the one-line total
    report.passed, report.exit_code   # True/False, 0/1
    report.to_dict()                  # everything, JSON-ready

Metrics are float64 against the exact golden, streamed in blocks; standards are data
(``refspec.comparator.standards``); input problems are per-output statuses. The names below
load their modules on first use (PEP 562), so ``refspec.comparator.standards`` can be read
without the judging machinery.
"""

import importlib

#: public name -> the module that defines it
_EXPORTS = {
    "compare": "run", "CompareUsageError": "run", "open_source": "run",
    "Report": "report", "OutputResult": "report",
    "MemoryCase": "memory_case", "spec_case": "memory_case",
    "STANDARDS": "standards", "STANDARD_NAMES": "standards", "resolve_rule": "standards",
    "Mapping": "..inputs.output_map", "MappingError": "..inputs.output_map",
    "load_mapping": "..inputs.output_map",
}

__all__ = list(_EXPORTS)


def __getattr__(name):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    where = module if module.startswith("..") else "." + module
    return getattr(importlib.import_module(where, __name__), name)


def __dir__():
    return sorted(set(globals()) | set(_EXPORTS))
