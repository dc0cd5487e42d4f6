"""The user's own inputs (docs/real_runs.md, docs/vendor_ut.md): the layer between the golden
store and the comparator that reads what users hand in.

- ``tensor_files``: raw ``.bin`` and ``.npy`` tensor files;
- ``case_folders``: case folders in the layout ``refspec export`` writes;
- ``msprobe_dump``: msprobe dumps (dump.json and its tensor files), the one reader of them;
- ``msprobe_calls``: golden cases of the API calls of a dump, as a mapping file names them;
- ``vendor_ut``: the vendor's NormRopeConcatGrad unit-test data;
- ``user_cases``: the described cases of any of these, computed and written like generated ones;
- ``output_map``: the comparator's mapping file (which dump tensor or .npz key is which output).
"""
