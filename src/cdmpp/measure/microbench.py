"""Two throughput figures of a device, measured with TVM kernels built for its target.

Cache sizes and the SIMD width say what a device has; these say what generated code gets out
of it, which is what the latency model needs to tell devices apart:

- `peak_gflops`: float32 multiply-adds in registers, parallel over `device.threads` threads and
  vectorized by the target's lanes. Each lane runs `_CHAINS` independent dependency chains,
  enough to hide FMA latency with the target's register count. Compiled for
  `device.target`, so an x86-64-v2 (SSE, no FMA) target measures lower than an AVX2/AVX-512
  one on the same host.
- `memory_gbps`: a STREAM-style triad `a = b + s * c` over 64 MiB arrays (far above any cache),
  bytes counted as STREAM does: two reads and one write per element (the write-allocate read is
  not counted).

Both take the best of several repeats, and `measure_device` the best of `ROUNDS` rounds a
moment apart: interference only ever makes a run slower, and a busy host can halve one round
(117 GFLOP/s once against 222-233 in ten other collections on the same VM), which would stay
in device.json for good.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from cdmpp.device import Device
from cdmpp.tvm_env import import_tvm

_FLOAT_BYTES = 4
_STEPS = 256  # outer (rolled) steps of the multiply-add chains
_UNROLL = 16  # multiply-adds per chain and step, unrolled
_ROWS_PER_THREAD = 16  # a multiple of the threads: no thread idles at the end
_PEAK_REPEATS, _PEAK_MIN_REPEAT_MS = 5, 50  # ~0.25 s
_STREAM_ELEMENTS = 16 * 2**20  # 64 MiB of float32 per array
_STREAM_CHUNK = 2**16  # elements per parallel task
_STREAM_REPEATS = 10  # ~10 ms each on a 2-core VM
ROUNDS = 3  # of both figures, interleaved: ~3-5 s once per device


def measure_device(device: Device) -> Device:
    """`device` with `peak_gflops` and `memory_gbps` measured on this machine (~3-5 s).

    Runs with `device.threads` TVM threads and code generated for `device.target`; the device
    id does not change (the figures are not identity fields).
    """
    # Imported here: collect imports this module.
    from cdmpp.measure.collect import threads_for

    peak = memory = 0.0
    with threads_for(device.threads):
        for _ in range(ROUNDS):
            peak, memory = max(peak, peak_gflops(device)), max(memory, memory_gbps(device))
    return dataclasses.replace(device, peak_gflops=round(peak, 2), memory_gbps=round(memory, 2))


def measured_local_device(threads: int | None = None, root=None) -> Device:
    """This machine as a device with its peak FLOP/s and bandwidth: measured once (~3-5 s) and
    kept in `<cache>/devices/<device_id>/device.json`, so every zero-shot prediction for it
    reads the same figures (two measurements of one VM's bandwidth differed by 30%)."""
    from cdmpp.device import local_device
    from cdmpp.measure.collect import claim_measured_device
    from cdmpp.paths import device_dir

    here = local_device(threads)
    device, _ = claim_measured_device(device_dir(here.device_id, root), threads)
    return device


def _lanes(device: Device) -> int:
    return max(device.vector_width_bits // (8 * _FLOAT_BYTES), 1)


def _chains(device: Device) -> int:
    # 12 chains (+ 2 constants) fit the 16 vector registers of SSE/AVX2 without spilling; they
    # cover FMA latency x throughput (4-5 cycles x 2 units). AVX-512 has 32 registers.
    return 16 if device.vector_width_bits >= 512 else 12


def _compile(func, target: dict):
    tvm = import_tvm()
    mod = tvm.IRModule({"main": func.with_attr("global_symbol", "main")})
    return tvm.compile(mod, target=tvm.target.Target(target)).jit()


def _best_s(module, args, *, repeat: int, min_repeat_ms: int = 0) -> float:
    tvm = import_tvm()
    evaluator = module.time_evaluator("main", tvm.cpu(), number=1, repeat=repeat,
                                      min_repeat_ms=min_repeat_ms)
    module["main"](*args)  # warm-up: thread pool start, page faults
    return float(min(evaluator(*args).results))


def _peak_func(rows: int, chains: int, lanes: int):
    import_tvm()
    from tvm.script import tirx as T

    width = chains * lanes

    @T.prim_func
    def peak(a: T.Buffer((rows, width), "float32"), b: T.Buffer((rows, width), "float32")):
        T.func_attr({"tir.noalias": True})
        for i in T.parallel(rows):
            acc = T.alloc_local((width,), "float32")  # registers once the loops are unrolled
            for j in T.vectorized(width):
                acc[j] = a[i, j]
            for _step in range(_STEPS):
                for _u in T.unroll(_UNROLL):
                    for k in T.unroll(chains):
                        for lane in T.vectorized(lanes):
                            # Converges to 1: no overflow, no denormals.
                            acc[k * lanes + lane] = (acc[k * lanes + lane] * T.float32(0.999)
                                                     + T.float32(0.001))
            for j in T.vectorized(width):
                b[i, j] = acc[j]

    return peak


def peak_gflops(device: Device) -> float:
    """Best float32 GFLOP/s of register-resident multiply-adds (2 FLOPs each)."""
    tvm = import_tvm()
    rows, chains, lanes = _ROWS_PER_THREAD * device.threads, _chains(device), _lanes(device)
    module = _compile(_peak_func(rows, chains, lanes), device.target)
    shape = (rows, chains * lanes)
    args = [tvm.runtime.tensor(np.ones(shape, "float32"), tvm.cpu()),
            tvm.runtime.empty(shape, "float32", tvm.cpu())]
    flops = 2 * rows * chains * lanes * _STEPS * _UNROLL
    best_s = _best_s(module, args, repeat=_PEAK_REPEATS, min_repeat_ms=_PEAK_MIN_REPEAT_MS)
    return flops / best_s / 1e9


def _triad_func(n: int, chunk: int, lanes: int):
    import_tvm()
    from tvm.script import tirx as T

    @T.prim_func
    def triad(a: T.Buffer((n,), "float32"), b: T.Buffer((n,), "float32"),
              c: T.Buffer((n,), "float32")):
        T.func_attr({"tir.noalias": True})
        for i in T.parallel(n // chunk):
            for j in range(chunk // lanes):
                for lane in T.vectorized(lanes):
                    # Indices spelled out: a `let` hides the ramp and LLVM emits gathers.
                    a[i * chunk + j * lanes + lane] = (
                        b[i * chunk + j * lanes + lane]
                        + T.float32(3) * c[i * chunk + j * lanes + lane])

    return triad


def memory_gbps(device: Device) -> float:
    """Best streaming bandwidth (GB/s, 1e9 bytes) of a parallel, vectorized triad."""
    tvm = import_tvm()
    n, lanes = _STREAM_ELEMENTS, _lanes(device)
    module = _compile(_triad_func(n, _STREAM_CHUNK, lanes), device.target)
    # Written, not just allocated: untouched pages all map to one zero page, which caches.
    args = [tvm.runtime.empty((n,), "float32", tvm.cpu()),
            tvm.runtime.tensor(np.full(n, 1.0, "float32"), tvm.cpu()),
            tvm.runtime.tensor(np.full(n, 2.0, "float32"), tvm.cpu())]
    best_s = _best_s(module, args, repeat=_STREAM_REPEATS)
    return 3 * n * _FLOAT_BYTES / best_s / 1e9
