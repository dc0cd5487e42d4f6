"""How one output is judged (docs/compare.md, "Judging" and "Standards"): the standards and the
rule of an output, each element's bounds and checks, one pass over the output's blocks (NumPy
for small outputs, compiled for large ones) into its metrics, the verdict, too strict, the
float16/bfloat16 hint, the heat map; and the status a kernel returned for a case. Imports only
``refspec.comparator.sources`` of the comparator's rooms."""
