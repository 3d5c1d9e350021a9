"""One place that imports TVM, fast.

`tvm.s_tir.tensor_intrin` registers the tensor intrinsics of every backend (CUDA, ROCm, Hexagon,
ARM, x86) and costs ~28 s on this machine, 18 s of it for CUDA alone. meta_schedule's
`TuneContext` and default builder import it unconditionally. On an x86 LLVM target only the
x86 intrinsics (and the shared dot-product helpers) can ever be used, so we register those and
mark the package as imported: the same design spaces and builds for ~1.5 s.
"""

from __future__ import annotations

import importlib
import importlib.util
import platform
import sys
import types

_TENSOR_INTRIN = "tvm.s_tir.tensor_intrin"


def import_tvm():
    """Import and return the `tvm` module, with only the intrinsics this host can use."""
    import tvm  # noqa: F401  (heavy, so lazy)

    if _TENSOR_INTRIN not in sys.modules:
        spec = importlib.util.find_spec(_TENSOR_INTRIN)
        package = types.ModuleType(_TENSOR_INTRIN)
        package.__path__ = list(spec.submodule_search_locations)
        package.__package__ = _TENSOR_INTRIN
        package.__spec__ = spec
        package.__doc__ = "cdmpp: host-only subset of tvm.s_tir.tensor_intrin"
        sys.modules[_TENSOR_INTRIN] = package
        try:
            machine = platform.machine().lower()
            names = ["x86"] if machine in ("x86_64", "amd64", "i686") else ["arm_cpu"]
            for name in names:
                setattr(package, name, importlib.import_module(f"{_TENSOR_INTRIN}.{name}"))
        except Exception:
            del sys.modules[_TENSOR_INTRIN]
            raise
    return sys.modules["tvm"]


def meta_schedule():
    """Return `tvm.s_tir.meta_schedule`, imported fast."""
    import_tvm()
    from tvm.s_tir import meta_schedule

    return meta_schedule
