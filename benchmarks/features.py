"""Feature extraction and feature-store throughput, and the store's memory bound.

    python benchmarks/features.py [--data ../shared/data/epyc-2c] [--memory-programs 1000000]

1. extraction: programs/s per core (CPU time) from a warm TVM process, per operator family,
   on real records (trace replay + faithfulness check + compact AST + TVM's per-store rows),
   and where the time of `extract` goes, stage by stage (docs/features.md);
2. store build: `cdmpp features` on the whole data set with all cores (wall time);
3. cached load: samples/s read back from the store (random batches of 512 programs);
4. memory: peak RSS while reading every program of a synthetic store of N programs out of core.
Targets: >= 300 programs/s per core extracted; >= 100,000 samples/s loaded; 1M programs in
<= 2 GB of RAM.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
FAMILIES = ("dense_128x768x768", "densegelu_128x768x3072", "bmm_12x128x128x64",
            "softmax_12x128x128", "layernorm_128x768", "conv3x3_1x64x56x56_k64s1",
            "conv1x1_1x256x56x56_k64", "dwconv3x3_1x144x56x56_s1", "maxpool3x3_1x64x112x112_s2")


def extraction(data: Path) -> dict:
    from cdmpp.features import extract
    from cdmpp.features.programs import measured_program
    from cdmpp.measure.database import load_database

    rows = {}
    for name in FAMILIES:
        db = load_database(data / name)
        workload = db.records[0].workload.mod()
        extract(measured_program(db.records[0], workload), db.records[0].target)  # warm up
        replay_s = extract_s = 0.0
        for rec in db.records:
            t0 = time.process_time()
            program = measured_program(rec, workload)  # trace replay + faithfulness check
            t1 = time.process_time()
            extract(program, rec.target)
            t2 = time.process_time()
            replay_s, extract_s = replay_s + t1 - t0, extract_s + t2 - t1
        n = len(db.records)
        rows[name] = {"extract_only": round(n / extract_s, 1),
                      "replay_and_extract": round(n / (replay_s + extract_s), 1)}
    mean = {}
    for column in ("extract_only", "replay_and_extract"):  # per-program time averaged over ops
        rates = [r[column] for r in rows.values()]
        mean[column] = round(len(rates) / sum(1 / v for v in rates), 1)
    rows["all (harmonic mean)"] = mean
    return rows


def stages(data: Path, names=("conv3x3_1x64x56x56_k64s1", "dwconv3x3_1x144x56x56_s1",
                                "dense_128x768x768")) -> dict:
    """CPU ms per program in each stage of `extract` (docs/features.md): TVM's per-store rows,
    our structural passes, the tree walk, the row-to-leaf proof, the loop view's columns."""
    from cdmpp.features import extract, loop_view, tir_tree, tvm_rows
    from cdmpp.features.matching import match_problems
    from cdmpp.features.programs import measured_program
    from cdmpp.measure.database import load_database

    out = {}
    for name in names:
        db = load_database(data / name)
        workload = db.records[0].workload.mod()
        programs = [measured_program(rec, workload) for rec in db.records]
        target = db.records[0].target
        extract(programs[0], target)  # warm up
        spent = dict.fromkeys(("tvm_rows", "passes", "tree", "match", "loop_view"), 0.0)
        for program in programs:
            t0 = time.process_time()
            sch, mod = tvm_rows.as_schedule_and_func(program)
            rows = tvm_rows.per_store_rows(sch, mod, target)
            t1 = time.process_time()
            func = tvm_rows.lowered_func(mod, "structural")
            t2 = time.process_time()
            tree = tir_tree.build_tree(func)
            t3 = time.process_time()
            match_problems(tree, rows)
            t4 = time.process_time()
            loop_view.leaf_rows(tree)
            t5 = time.process_time()
            for stage, dt in zip(spent, (t1 - t0, t2 - t1, t3 - t2, t4 - t3, t5 - t4)):
                spent[stage] += dt
        out[name] = {stage: round(1e3 * v / len(programs), 2) for stage, v in spent.items()}
        out[name]["tvm_share"] = round(spent["tvm_rows"] / sum(spent.values()), 3)
    return out


def store_build(data: Path, store: Path) -> dict:
    from cdmpp.features.build import build_store

    start = time.perf_counter()
    report = build_store([data], store, progress=False)
    seconds = time.perf_counter() - start
    return {"records": report.records, "programs": report.extracted,
            "failed": len(report.failures), "seconds": round(seconds, 1),
            "programs_per_s_wall": round(report.extracted / seconds, 1)}


def cached_load(store_path: Path, batches: int = 200, batch: int = 512) -> dict:
    from cdmpp.features.store import FeatureStore

    start = time.perf_counter()
    store = FeatureStore(store_path)
    keys = store.samples().column("key").to_pylist()
    open_s = time.perf_counter() - start
    rng = np.random.default_rng(0)
    start = time.perf_counter()
    n = 0
    for _ in range(batches):
        picked = [keys[i] for i in rng.integers(0, len(keys), size=batch)]
        for features, pos in store.programs(picked):
            n += features.shape[0] > 0
    seconds = time.perf_counter() - start
    return {"open_s": round(open_s, 3), "samples_per_s": round(n / seconds)}


def _synthetic_store(path: Path, n_programs: int, shard_size: int = 250_000) -> None:
    """Shards of random programs with 1-9 leaves each (the layout `write_shard` produces)."""
    rng = np.random.default_rng(0)
    for s, lo in enumerate(range(0, n_programs, shard_size)):
        n = min(shard_size, n_programs - lo)
        counts = rng.integers(1, 10, size=n)
        total = int(counts.sum())
        d = path / "shards" / f"{s:05d}"
        d.mkdir(parents=True)
        np.save(d / "leaf_offsets.npy", np.concatenate([[0], np.cumsum(counts)]).astype(np.int64))
        np.save(d / "leaf_features.npy", rng.random((total, 164), dtype=np.float32))
        np.save(d / "leaf_pos.npy", np.tile(np.arange(9, dtype=np.int32), total // 9 + 1)[:total])
        np.save(d / "leaf_node.npy", np.zeros(total, dtype=np.int32))
        (d / "keys.json").write_text(json.dumps([f"{lo + i:032x}" for i in range(n)]))


# RssAnon is the memory the process needs; file-backed pages of the memory-mapped shards also
# count in the RSS but are page cache the kernel drops under pressure.
_MEMORY_CHILD = """
import resource, sys, numpy as np
from cdmpp.features.store import FeatureStore
def anon_kib():
    for line in open("/proc/self/status"):
        if line.startswith("RssAnon:"):
            return int(line.split()[1])
store = FeatureStore(sys.argv[1])
peak_anon, total = anon_kib(), 0.0
for shard in store.shards:
    for row in range(len(shard.keys)):
        f, p = shard.leaves(row)
        total += float(f[0, 0])
        if row % 50000 == 0:
            peak_anon = max(peak_anon, anon_kib())
print(max(peak_anon, anon_kib()), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
"""


def memory(n_programs: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        _synthetic_store(Path(tmp), n_programs)
        size = sum(f.stat().st_size for f in Path(tmp).rglob("*")) / 2**30
        start = time.perf_counter()
        out = subprocess.run([sys.executable, "-c", _MEMORY_CHILD, tmp], check=True,
                             capture_output=True, text=True).stdout
        seconds = time.perf_counter() - start
    anon_kib, rss_kib = (int(v) for v in out.strip().splitlines()[-1].split())
    return {"programs": n_programs, "store_gib": round(size, 2),
            "peak_anonymous_mib": round(anon_kib / 1024),
            "peak_rss_mib_incl_page_cache": round(rss_kib / 1024), "seconds": round(seconds, 1)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data" / "epyc-2c")
    parser.add_argument("--memory-programs", type=int, default=1_000_000)
    parser.add_argument("--json", help="also write the figures here")
    args = parser.parse_args()
    figures = {"extraction_programs_per_s_per_core": extraction(args.data),
               "extract_stages_cpu_ms_per_program": stages(args.data)}
    with tempfile.TemporaryDirectory() as tmp:
        figures["store_build"] = store_build(args.data, Path(tmp) / "store")
        figures["cached_load"] = cached_load(Path(tmp) / "store")
    if args.memory_programs:
        figures["memory"] = memory(args.memory_programs)
    print(json.dumps(figures, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
