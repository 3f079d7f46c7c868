"""judgeflow's benchmarks (not part of the test suite): ``python -m bench.run --help``."""
