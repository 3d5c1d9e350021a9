"""TVM's per-store feature rows for one kernel, and the TIR our tree is built from.

`PerStoreFeature` (C++ `s_tir.meta_schedule.FeatureExtractorPerStoreFeature`) only runs from
`extract_from(TuneContext, [MeasureCandidate])`, and only reads `candidate.sch.mod`, the target
(GPU or not) and nothing else: so one cached context per target, one `Schedule` per kernel (or the
caller's own, e.g. from `replay_trace`) and an empty `args_info` are all it needs.

What 0.27 does (the C++ source is not installed: the pass list below was read with a pass
instrument, and every behaviour named here was checked by experiment, see tests/features): it
copies the module, runs RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite) ->
SimplifyForFeatureExtraction -> LowerCrossThreadReduction -> LowerInitBlock ->
PlanAndUpdateBufferAllocationLocation -> ConvertBlocksToOpaque -> CompactBufferAllocation ->
StmtSimplify -> LowerAutoCopy -> UnifyThreadBinding -> LowerMatchBuffer -> StmtSimplify, then
emits ONE ROW PER BUFFER written by a store whose value is not a constant, in the order of each
buffer's first such store, with the loop-nest features of its LAST such store.
SimplifyForFeatureExtraction is not exposed to Python (the walker emulates it); the passes that
change the statement structure are cheap and run here ("structural"); the others only rewrite
shapes and indices, except StmtSimplify, which may fold a store to a constant ("full", the
fallback).

CompactBufferAllocation and the two StmtSimplify runs are ~85% of the call on a convolution. On
CPU kernels the three passes between the two simplifications usually change nothing, and the
second simplification then re-simplifies its own output: `skipping_repeated_simplify` skips it
only when the module it would get is structurally equal to what the first one returned. Rows
with and without the skip were bit-identical on every stored record (docs/features.md).
"""

from __future__ import annotations

import contextlib
import json
import threading

from cdmpp.tvm_env import import_tvm, meta_schedule

_LOCK = threading.Lock()
_CONTEXTS: dict = {}
_PASSES: dict = {}
_SIMPLIFY = "s_tir.StmtSimplify"
_SKIPPER: list = []  # the pass-instrument class, made once (it needs TVM)


def target_key(target) -> str:
    """A canonical string for a target given as dict, JSON/CLI string or `tvm.target.Target`."""
    if isinstance(target, dict):
        return json.dumps(target, sort_keys=True)
    if isinstance(target, str):
        return target
    return str(target)


def _context(target):
    """(TuneContext, PerStoreFeature) for this target, built once per process."""
    key = target_key(target)
    with _LOCK:
        hit = _CONTEXTS.get(key)
        if hit is None:
            tvm, ms = import_tvm(), meta_schedule()
            tgt = target if isinstance(target, tvm.target.Target) else tvm.target.Target(target)
            ctx = ms.TuneContext(mod=None, target=tgt, num_threads=1)
            hit = _CONTEXTS[key] = (ctx, ms.feature_extractor.PerStoreFeature())
        return hit


def _passes(kind: str):
    with _LOCK:
        seq = _PASSES.get(kind)
        if seq is None:
            tvm = import_tvm()
            from tvm.s_tir import transform as st

            structural = [
                st.RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True),
                st.LowerCrossThreadReduction(),
                st.LowerInitBlock(),
                st.PlanAndUpdateBufferAllocationLocation(),
                st.ConvertBlocksToOpaque(),
                st.UnifyThreadBinding(),
            ]
            full = structural + [
                st.CompactBufferAllocation(),
                st.LowerMatchBuffer(),
                tvm.tirx.transform.StmtSimplify(),
            ]
            _PASSES["structural"] = tvm.transform.Sequential(structural)
            _PASSES["full"] = tvm.transform.Sequential(full)
            seq = _PASSES[kind]
        return seq


def _one_prim_func(mod):
    tvm = import_tvm()
    funcs = [(gv, f) for gv, f in mod.functions.items() if isinstance(f, tvm.tirx.PrimFunc)]
    if len(funcs) != 1:
        names = sorted(gv.name_hint for gv, _ in funcs)
        raise ValueError(f"extract() needs one PrimFunc (one kernel); the module has {names}")
    return funcs[0][1]


def as_schedule_and_func(obj):
    """Schedule / IRModule (one PrimFunc) / PrimFunc -> (Schedule or None, 1-function IRModule)."""
    tvm = import_tvm()
    from tvm import s_tir

    if isinstance(obj, s_tir.Schedule):
        mod = obj.mod
        func = _one_prim_func(mod)
        return (obj, mod) if len(mod.functions) == 1 else (None, tvm.IRModule({"main": func}))
    if isinstance(obj, tvm.tirx.PrimFunc):
        return None, tvm.IRModule({"main": obj})
    if isinstance(obj, tvm.IRModule):
        func = _one_prim_func(obj)
        return None, (obj if len(obj.functions) == 1 else tvm.IRModule({"main": func}))
    kind = type(obj).__name__
    raise TypeError(f"extract() takes a PrimFunc, an IRModule or a Schedule, not {kind}")


def lowered_func(mod, kind: str = "structural"):
    """The single PrimFunc of `mod` after the structural (or full) feature pass list."""
    out = _passes(kind)(mod)
    (func,) = out.functions.values()
    return func


def _neutral_pragma_nodes(stmt, tirx, neutral):
    """`stmt` with every `AttrStmt(<Var>, "pragma_*")` pointed at `neutral` (None: unchanged)."""
    t = type(stmt)
    if t is tirx.SeqStmt:
        items = list(stmt.seq)
        new = [_neutral_pragma_nodes(s, tirx, neutral) for s in items]
        if all(n is None for n in new):
            return None
        return tirx.SeqStmt([o if n is None else n for o, n in zip(items, new)])
    if t is tirx.AttrStmt:
        body = _neutral_pragma_nodes(stmt.body, tirx, neutral)
        bad = str(stmt.attr_key).startswith("pragma_") and isinstance(stmt.node, tirx.Var)
        if body is None and not bad:
            return None
        node = neutral if bad else stmt.node
        return tirx.AttrStmt(node, stmt.attr_key, stmt.value, stmt.body if body is None else body)
    if t is tirx.For:
        body = _neutral_pragma_nodes(stmt.body, tirx, neutral)
        if body is None:
            return None
        return tirx.For(stmt.loop_var, stmt.min, stmt.extent, stmt.kind, body,
                        stmt.thread_binding, stmt.annotations, stmt.step)  # fmt: skip
    if t is tirx.IfThenElse:
        then = _neutral_pragma_nodes(stmt.then_case, tirx, neutral)
        other = stmt.else_case
        new_other = None if other is None else _neutral_pragma_nodes(other, tirx, neutral)
        if then is None and new_other is None:
            return None
        return tirx.IfThenElse(stmt.condition, stmt.then_case if then is None else then,
                               other if new_other is None else new_other)  # fmt: skip
    return None


def _schedule(mod):
    """A Schedule of `mod` (only its `mod` is read by the extractor).

    TVM's own LowerOpaqueBlock emits `AttrStmt(loop_var, "pragma_auto_unroll_max_step", ...)`
    OUTSIDE the loop that defines `loop_var`, which Schedule's well-formedness check rejects. The
    feature extractor never reads those statements' `node`, so for such already-lowered kernels
    it is replaced by a constant and the Schedule built again.
    """
    tvm = import_tvm()
    from tvm import s_tir, tirx

    try:
        return s_tir.Schedule(mod, enable_check=False)
    except Exception as err:
        if "undefined variable" not in str(err):
            raise
        gv, func = next(iter(mod.functions.items()))
        body = _neutral_pragma_nodes(func.body, tirx, tirx.IntImm("int32", 0))
        if body is None:
            raise
        return s_tir.Schedule(tvm.IRModule({gv: func.with_body(body)}), enable_check=False)


def _skipper_class():
    with _LOCK:
        if not _SKIPPER:
            import_tvm()
            from tvm.ir.instrument import pass_instrument

            from cdmpp.measure.tvm_codec import structural_equal

            @pass_instrument
            class SkipRepeatedSimplify:
                """Skips a StmtSimplify whose input is what the previous one returned."""

                def __init__(self):
                    self.simplified = None
                    self.skipped = 0

                def should_run(self, mod, info):
                    if info.name != _SIMPLIFY or self.simplified is None:
                        return True
                    if structural_equal(mod, self.simplified):
                        self.skipped += 1
                        return False
                    return True

                def run_after_pass(self, mod, info):
                    if info.name == _SIMPLIFY:
                        self.simplified = mod

            _SKIPPER.append(SkipRepeatedSimplify)
        return _SKIPPER[0]


@contextlib.contextmanager
def skipping_repeated_simplify():
    """A PassContext (the caller's settings kept) in which the feature passes skip their second
    StmtSimplify when it would re-simplify its own output; yields the instrument (`.skipped`).
    Under a caller's own pass instruments nothing is skipped (yields None)."""
    tvm = import_tvm()
    outer = tvm.transform.PassContext.current()
    if len(outer.instruments):
        yield None
        return
    skipper = _skipper_class()()
    ctx = tvm.transform.PassContext(opt_level=outer.opt_level,
                                    required_pass=list(outer.required_pass),
                                    disabled_pass=list(outer.disabled_pass),
                                    instruments=[skipper], config=dict(outer.config))
    with ctx:
        yield skipper


def per_store_rows(sch, mod, target, exact: bool = False):
    """TVM's (n_rows, 164) float32 per-store matrix of `mod` (via `sch` if given).
    `exact`: run TVM's pass list in full (default: skip its repeated StmtSimplify, above)."""
    ms = meta_schedule()

    ctx, extractor = _context(target)
    if sch is None:
        sch = _schedule(mod)
    candidate = [ms.MeasureCandidate(sch, [])]
    if exact:
        (rows,) = extractor.extract_from(ctx, candidate)
    else:
        with skipping_repeated_simplify():
            (rows,) = extractor.extract_from(ctx, candidate)
    return rows.numpy()


def is_gpu(target) -> bool:
    ctx, _ = _context(target)
    return "gpu" in [str(k) for k in ctx.target.keys]
