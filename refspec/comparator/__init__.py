"""The comparator: judge a kernel's outputs against golden cases (docs/compare.md).

    report = refspec.compare("smoke.h5", "kernel_out/", standard="default")
    print(report)                     # the terminal table and the one-line total
    report.passed, report.exit_code   # True/False, 0/1
    report.to_dict()                  # everything, JSON-ready

Metrics are float64 against the exact golden, streamed in blocks; standards are data
(``refspec.comparator.judging.standards``); input problems are per-output statuses. The names
below load their modules on first use (PEP 562), so the standards can be read without the rest
of the machinery.

Four rooms, imports only from a room to those before it:

- ``sources``: where the actual outputs come from (directory trees, ``.npz``/``.npy``, HDF5,
  msprobe dumps, arrays, an implementation's functions) and golden cases computed in memory;
- ``judging``: how one output is judged (standards, the element checks, one pass over its
  blocks, the verdict) and a case's status;
- ``diagnosis``: why a failing output failed, and the patterns across cases;
- ``reports``: how the verdicts are shown (the ``Report``, terminal, JSON, JUnit, HTML).

``refspec.comparator.comparison`` sits above them: ``compare()`` runs a comparison through all
four.
"""

import importlib

#: public name -> the module that defines it
_EXPORTS = {
    "compare": "comparison", "CompareUsageError": "sources.base", "open_source": "sources.opening",
    "Report": "reports.report", "OutputResult": "judging.outcomes",
    "MemoryCase": "sources.memory_case", "spec_case": "sources.memory_case",
    "Implementation": "sources.implementation",
    "STANDARDS": "judging.standards", "STANDARD_NAMES": "judging.standards",
    "resolve_rule": "judging.standards",
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
