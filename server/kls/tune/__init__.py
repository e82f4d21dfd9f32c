"""`kls tune`: find the best CUTLASS op and template variables for an instance.

candidates (space.py, candidates.py) -> parallel builds (executors.py) -> verify, then time on
the GPU, two stages (gpu.py driving worker.py) -> results, table, CSV, plot (results.py,
plot.py) -> the winner written back to kls.toml (apply.py). runner.py ties the steps together.
"""
