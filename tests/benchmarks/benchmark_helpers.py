"""Benchmarks are scripts, not a package: their tests load them by path."""

import importlib.util
from pathlib import Path

BENCHMARKS = Path(__file__).parents[2] / "benchmarks"


def load_benchmark(filename: str):
    """The module of benchmarks/<filename>, freshly executed (its main() not run)."""
    spec = importlib.util.spec_from_file_location(Path(filename).stem + "_benchmark",
                                                  BENCHMARKS / filename)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
