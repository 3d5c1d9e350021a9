"""A meta_schedule builder that compiles in a forked child, killed at a time limit.

    database = ms.tune_tir(func, target, "work_dir", 64, cost_model=cdmpp.tune.cost_model(),
                           builder=cdmpp.tune.builder())

TVM's LocalBuilder starts worker processes that import TVM again (about 20 s here, with its
tensor intrinsics), and a worker killed at the time limit is replaced by a new one that pays
it again. This builder is the collector's (`cdmpp.measure.build`): a child forked from the
tuning process inherits the imported TVM, compiles the programs it takes from the batch's
queue, and is killed (and replaced by a new fork) when one program takes longer than
`timeout_s`. One child per core compiles at once: the tuner times nothing while it builds
(the collector, which times while it compiles, keeps to one). Each program is handed to the
runner as LLVM IR (`.ll`), which TVM's LocalRunner loads as it loads a library.
"""

from __future__ import annotations

import functools
import shutil
import tempfile
import weakref
from pathlib import Path


def builder(timeout_s: float = 30.0, workers: int | None = None):
    """A `tvm.s_tir.meta_schedule.builder.Builder` for `tune_tir`/`tune_relax`. `workers`:
    children compiling at once (default: the cores this process may use)."""
    if not timeout_s > 0:
        raise ValueError(f"timeout_s must be positive, got {timeout_s!r}")
    if workers is not None and workers < 1:
        raise ValueError(f"workers must be at least 1, got {workers!r}")
    return _builder_class()(timeout_s, workers)


def build_batch(mods, targets, timeout_s: float, work_dir: Path,
                workers: int | None = None) -> list[tuple[str | None, str | None]]:
    """(artifact path, None) or (None, error) for each module, built for its target in
    forked children: `workers` of them (default: one per core) take the consecutive modules
    of one target from a queue, each the next as it finishes one."""
    import os

    from cdmpp.measure.build import compile_from_queue

    workers = workers or len(os.sched_getaffinity(0))
    out: list = [None] * len(mods)
    start = 0
    while start < len(mods):
        end = start
        while end < len(mods) and str(targets[end]) == str(targets[start]):
            end += 1
        paths = []
        for i in range(start, end):  # a directory each: TVM's RemoveBuildArtifact deletes an
            (work_dir / str(i)).mkdir()  # artifact's directory once it has been run
            paths.append(str(work_dir / str(i) / "main.ll"))
        reports = compile_from_queue(mods[start:end], targets[start], timeout_s, paths,
                                     workers)
        for i, (path, report) in enumerate(zip(paths, reports), start):
            out[i] = (None, report["error"]) if "error" in report else (path, None)
        start = end
    return out


@functools.cache
def _builder_class():
    """The PyBuilder subclass, made on first use: `import cdmpp.tune` imports no TVM."""
    from cdmpp.tvm_env import import_tvm

    import_tvm()
    from tvm.ir.utils import derived_object
    from tvm.s_tir.meta_schedule.builder import BuilderResult, PyBuilder

    from cdmpp.measure.build import work_dir_prefix

    @derived_object
    class ForkBuilder(PyBuilder):
        """meta_schedule builds in forked children (`cdmpp.tune.builder`)."""

        def __init__(self, timeout_s: float, workers: int | None):
            super().__init__()
            self.timeout_s = timeout_s
            self.workers = workers
            # named as the collector's build directories: removed by a later build when
            # this process was killed
            self._root = Path(tempfile.mkdtemp(prefix=work_dir_prefix()))
            weakref.finalize(self, shutil.rmtree, self._root, True)
            self._batches = 0

        def build(self, build_inputs):
            self._batches += 1
            work = self._root / str(self._batches)
            work.mkdir()
            built = build_batch([b.mod for b in build_inputs],
                                [b.target for b in build_inputs], self.timeout_s, work,
                                self.workers)
            # TVM's RemoveBuildArtifact callback deletes each built program's directory
            # once it has run (not before: the runner may still be loading it while the
            # next batch is built); a failed build's is empty, and goes now
            for i, (path, _) in enumerate(built):
                if path is None:
                    shutil.rmtree(work / str(i), ignore_errors=True)
            return [BuilderResult(path, error) for path, error in built]

    return ForkBuilder
