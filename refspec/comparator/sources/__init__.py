"""Where the actual outputs come from (docs/compare.md, "Actual outputs"): the sources a
comparison reads a kernel's outputs and statuses from (directory trees, ``.npz``/``.npy``,
HDF5, msprobe dumps, Python arrays, an implementation's functions), and golden cases computed in
memory (``memory_case``). Nothing here judges anything; the judging
(``refspec.comparator.judging``) reads what a source gives."""
