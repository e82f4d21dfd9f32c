"""Benchmark: verified GPU timings of a built instance, measured in an isolated worker process.

The worker (`kls.bench.worker`) imports only numpy and cuda-python (and torch for the optional
cuBLAS baseline); everything else here is plain Python testable without a GPU.
"""
