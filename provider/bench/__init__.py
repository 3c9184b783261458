"""`litenpu bench`: the benchmark suite, side by side with onnxruntime in the same run.

Two parts, one report (`docs/benchmarks/README.md` plus PNG plots):

* `models`: the zoo models (shipped in the package) on onnxruntime's CPU provider and on the
  NPU EP (numpy I/O and NPU-bound I/O), session creation cold vs warm, bytes copied, accuracy.
  Part of the package, so it runs from any directory after `pip install .`.
* `scripts`: every `benchmarks/bench_*.py` of a litenpu checkout, each run as a subprocess
  (each prints its own same-run onnxruntime/numpy baseline); their output goes into the
  report verbatim. The scripts belong to the rooms that define them and are not installed,
  so this part needs a checkout (`--benchmarks DIR`, else found from the working directory)
  and the report says so when there is none.

`machine.describe()` records where the numbers come from; `report.write()` writes the files.
"""
