"""Walk a PrimFunc's TIR and build the compact-AST node lists (no features yet).

The walk sees the function after the structural part of TVM's per-store feature pass list
(`tvm_rows.lowered_func`) and emulates the one pass TVM does not expose to Python,
`SimplifyForFeatureExtraction`: a serial loop with min 0, extent 1 and no annotations is dropped
(its variable reads as 0), and a `Select` without buffer loads reads as the constant 1.

Node rules (pre-order ids; the parent of a node is the nearest enclosing node):
- `For` -> FOR_<kind> with its extent (-1 when not a constant). A loop's `pragma_*`
  annotations become ATTR nodes wrapping it, outermost first in key order, as TVM's
  `LowerOpaqueBlock` turns them into `AttrStmt`s, so block-form and lowered TIR agree.
- `AttrStmt` `thread_extent` / `virtual_thread` (extent = its value) and `pragma_*` -> ATTR;
  other attribute statements are transparent.
- each buffer a block allocates, and each `AllocBuffer` statement -> ALLOC, whose children are
  the statements in the allocation's scope (the block body; the rest of the enclosing sequence).
- `BufferStore` -> STORE if TVM featurizes it, STORE_CONST if its value folds to a scalar
  constant (TVM skips those: reduction inits, fills). Only STORE nodes are leaves.
- blocks, `if`, `while`, sequences, `Bind`, `DeclBuffer`, asserts are transparent.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# node kinds (int8 codes)
FOR_SERIAL, FOR_PARALLEL, FOR_VECTORIZED, FOR_UNROLLED, FOR_THREAD_BINDING = 0, 1, 2, 3, 4
ATTR, ALLOC, STORE, STORE_CONST = 5, 6, 7, 8
KIND_NAMES = ("FOR_SERIAL", "FOR_PARALLEL", "FOR_VECTORIZED", "FOR_UNROLLED",
              "FOR_THREAD_BINDING", "ATTR", "ALLOC", "STORE", "STORE_CONST")  # fmt: skip
_ATTR_KEYS = ("thread_extent", "virtual_thread")
AUTO_UNROLL = "pragma_auto_unroll_max_step"


@dataclass
class LeafLoops:
    """What TVM's `LoopNest` sees above one store: the facts its rows must agree with."""

    n_loops: int = 0
    prod: int | None = 1  # product of constant extents of all loops (None: a symbolic extent)
    kinds: dict = field(default_factory=dict)  # for-kind -> [extents] (outer first)
    auto_unroll: int = 0  # innermost loop's pragma_auto_unroll_max_step (0: none)


@dataclass
class TreeBuild:
    kinds: list = field(default_factory=list)
    parents: list = field(default_factory=list)
    extents: list = field(default_factory=list)
    leaves: list = field(default_factory=list)  # node ids of STORE nodes, pre-order
    leaf_buffers: list = field(default_factory=list)  # (handle, name) of each leaf's buffer
    leaf_loops: list = field(default_factory=list)  # LeafLoops of each leaf
    # each leaf's BufferStore and its enclosing loops (outer first, unit loops dropped) as the
    # walk parsed them, (kind, extent | None, auto_unroll | None, For node): read by `loop_view`
    leaf_nests: list = field(default_factory=list)


class _Types:
    """The TVM classes the walker dispatches on (resolved once, TVM imported lazily)."""

    def __init__(self):
        from tvm import ir, s_tir, tirx

        self.For, self.SeqStmt, self.AttrStmt = tirx.For, tirx.SeqStmt, tirx.AttrStmt
        self.BufferStore, self.AllocBuffer = tirx.BufferStore, tirx.AllocBuffer
        self.IfThenElse, self.While = tirx.IfThenElse, tirx.While
        self.SBlock, self.SBlockRealize = s_tir.SBlock, s_tir.SBlockRealize
        self.IntImm, self.FloatImm = tirx.IntImm, tirx.FloatImm
        self.Var, self.Select, self.Cast = tirx.Var, tirx.Select, tirx.Cast
        self.Load = ir.TensorLoad
        self.binary = tuple(
            getattr(tirx, n)
            for n in ("Add", "Sub", "Mul", "Div", "Mod", "FloorDiv", "FloorMod", "Min", "Max",
                      "EQ", "NE", "LT", "LE", "GT", "GE", "And", "Or")  # fmt: skip
        )
        self.Not = tirx.Not
        self.serial = int(tirx.ForKind.SERIAL)


_TYPES: _Types | None = None


def _types() -> _Types:
    global _TYPES
    if _TYPES is None:
        _TYPES = _Types()
    return _TYPES


def _int_or_none(expr, ty: _Types):
    if isinstance(expr, ty.IntImm):
        return int(expr.value)
    if isinstance(expr, int):  # annotation values come back as Python ints
        return int(expr)
    return None


def _has_load(expr, ty: _Types) -> bool:
    """Conservative: True when `expr` may contain a buffer load."""
    t = type(expr)
    if t is ty.Load:
        return True
    if t in (ty.IntImm, ty.FloatImm) or isinstance(expr, ty.Var):
        return False
    if t in ty.binary:
        return _has_load(expr.a, ty) or _has_load(expr.b, ty)
    if t is ty.Select:
        return any(_has_load(e, ty) for e in (expr.condition, expr.true_value, expr.false_value))
    if t is ty.Cast:
        return _has_load(expr.value, ty)
    if t is ty.Not:
        return _has_load(expr.a, ty)
    args = getattr(expr, "args", None)  # calls
    if args is not None:
        return any(_has_load(a, ty) for a in args)
    return True


def _folds_to_const(expr, unit_vars: set, ty: _Types) -> bool:
    """Does TVM's pass list (select folding, unit loops -> 0, Simplify) make this a scalar const?"""
    t = type(expr)
    if t is ty.IntImm or t is ty.FloatImm:
        return True
    if isinstance(expr, ty.Var):
        return expr.__chandle__() in unit_vars
    if t is ty.Select:
        return not _has_load(expr, ty)  # SimplifyForFeatureExtraction: -> 1
    if t in ty.binary:
        return _folds_to_const(expr.a, unit_vars, ty) and _folds_to_const(expr.b, unit_vars, ty)
    if t is ty.Cast:
        return _folds_to_const(expr.value, unit_vars, ty)
    if t is ty.Not:
        return _folds_to_const(expr.a, unit_vars, ty)
    return False  # loads, calls, ramps, broadcasts...: TVM featurizes the store


class _Walker:
    def __init__(self):
        self.ty = _types()
        self.out = TreeBuild()
        self.unit_vars: set = set()
        # (kind, extent | None, auto_unroll | None, the For node) of the enclosing loops
        self.loops: list = []

    def add(self, kind: int, parent: int, extent: int = 1) -> int:
        out = self.out
        out.kinds.append(kind)
        out.parents.append(parent)
        out.extents.append(extent)
        return len(out.kinds) - 1

    def prune(self, node: int, wrappers: int = 0) -> None:
        """Drop `node` (and the `wrappers` pragma ATTR nodes around it) if nothing is under it.

        An empty loop nest (e.g. what RemoveWeightLayoutRewriteBlock leaves of the layout-rewrite
        block) does no work and is removed by the build (RemoveNoOp): it gets no node.
        """
        out = self.out
        for _ in range(wrappers + 1):
            if node != len(out.kinds) - 1:
                return
            out.kinds.pop()
            out.extents.pop()
            node = out.parents.pop()

    def seq(self, stmts, parent: int) -> None:
        ty = self.ty
        for i, s in enumerate(stmts):
            if type(s) is ty.AllocBuffer:  # flat allocation: its scope is the rest of the sequence
                self.seq(stmts[i + 1 :], self.add(ALLOC, parent))
                return
            self.visit(s, parent)

    def visit(self, s, parent: int) -> None:
        ty = self.ty
        t = type(s)
        if t is ty.SeqStmt:
            self.seq(list(s.seq), parent)
        elif t is ty.For:
            self.loop(s, parent)
        elif t is ty.SBlockRealize:
            self.visit(s.block, parent)
        elif t is ty.SBlock:
            for _ in s.alloc_buffers:
                parent = self.add(ALLOC, parent)
            if s.init is not None:  # LowerInitBlock puts the init before the body
                self.visit(s.init, parent)
            self.visit(s.body, parent)
        elif t is ty.BufferStore:
            self.store(s, parent)
        elif t is ty.AttrStmt:
            key = str(s.attr_key)
            if key in _ATTR_KEYS or key.startswith("pragma_"):
                ext = _int_or_none(s.value, ty) if key in _ATTR_KEYS else 1
                node = self.add(ATTR, parent, -1 if ext is None else ext)
                self.visit(s.body, node)
                self.prune(node)
            else:
                self.visit(s.body, parent)
        elif t is ty.IfThenElse:
            self.visit(s.then_case, parent)
            if s.else_case is not None:
                self.visit(s.else_case, parent)
        elif t is ty.AllocBuffer:
            self.add(ALLOC, parent)
        else:  # While, and anything else with a body; Evaluate/Bind/DeclBuffer/asserts: nothing
            body = getattr(s, "body", None)
            if body is not None:
                self.visit(body, parent)

    def loop(self, s, parent: int) -> None:
        ty = self.ty
        kind = int(s.kind)
        ext = _int_or_none(s.extent, ty)
        ann = s.annotations
        if kind == ty.serial and ext == 1 and not ann and _int_or_none(s.min, ty) == 0:
            self.unit_vars.add(s.loop_var.__chandle__())  # SimplifyForFeatureExtraction
            self.visit(s.body, parent)
            return
        unroll, wrappers = None, 0
        if ann:
            for key in sorted(str(k) for k in ann.keys()):
                if key.startswith("pragma_"):
                    parent = self.add(ATTR, parent)
                    wrappers += 1
            if AUTO_UNROLL in ann:
                unroll = _int_or_none(ann[AUTO_UNROLL], ty)
        node = self.add(FOR_SERIAL + kind, parent, -1 if ext is None else ext)
        self.loops.append((kind, ext, unroll, s))
        self.visit(s.body, node)
        self.loops.pop()
        self.prune(node, wrappers)

    def store(self, s, parent: int) -> None:
        ty = self.ty
        if _folds_to_const(s.value, self.unit_vars, ty):
            self.add(STORE_CONST, parent)
            return
        out = self.out
        out.leaves.append(self.add(STORE, parent))
        buf = s.buffer
        out.leaf_buffers.append((buf.__chandle__(), str(buf.name)))
        info = LeafLoops(n_loops=len(self.loops))
        for kind, ext, unroll, _ in self.loops:
            if info.prod is not None:
                info.prod = None if ext is None else info.prod * ext
            info.kinds.setdefault(kind, []).append(ext)
            if unroll is not None:
                info.auto_unroll = unroll
        out.leaf_loops.append(info)
        out.leaf_nests.append((s, tuple(self.loops)))


def build_tree(func) -> TreeBuild:
    """Node lists of one PrimFunc (already through the structural passes)."""
    w = _Walker()
    w.visit(func.body, -1)
    return w.out
