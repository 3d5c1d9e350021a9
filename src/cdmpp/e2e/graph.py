"""The dataflow graph of a network: one node per runtime call of its Relax `main`.

    graph = from_relax(net.mod)           # after kernels.lower_network (fused)
    graph.kernel_calls()                  # {"fused_conv2d_add_relu": 4, ...}

Node kinds (what the VM does at run time):
  call_tir         a kernel: `R.call_tir` / `R.call_tir_inplace` of a PrimFunc in the module
  call_dps_packed  an external kernel (`R.call_dps_packed`, e.g. a library call): a kernel too,
                   but cdmpp cannot featurize it, so its duration must be given
  packed           `R.call_pure_packed` / `R.call_packed` of a function other than a VM builtin:
                   external work, so its duration must be given too
  builtin          a VM builtin without a kernel: `R.reshape` left by RewriteDataflowReshape (a
                   no-copy view), shape functions, `vm.builtin.*` packed calls
  op               any other Relax operator still present (not legalized): needs a duration
Tuples, tuple items, variable aliases and constants are not runtime calls: they only pass
data, so a node that reads `(a, b)[0]` depends on the producers of `a` and `b` (conservative).

An edge i -> j means node j reads a value node i produced. Node ids are the program order.
A kernel node also counts the bytes of the network's matrix weights it reads in full
(`weight_bytes`: constants of at most two dimensions, a Linear layer's weight and bias): every
inference reads them again, and when they are more than the caches hold they come from memory,
where the kernel timed alone found them in cache (`e2e.cold`). A convolution's weights (four
dimensions) are not counted: in networks far beyond the caches, convolutions ran 1.00-1.11x
their time alone on three CPUs, weight matmuls 1.07-1.42x (docs/measurement.md, "Matrix
weights, and the cache a VM really has"). A constant the kernel only gathers rows of (an
embedding table read at data-dependent indices) is not counted: it reads a few rows, not the
table. It also counts the bytes of the activations it reads (`activation_bytes`: its arguments
that are not constants, the network's inputs and other calls' outputs): in a network another
kernel has just written them, where the kernel timed alone re-reads its own inputs from its own
cache (`e2e.activations`).
The dataclasses are plain Python (no TVM objects) so graphs can also be made by hand.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import Mapping

KERNEL_KINDS = ("call_tir", "call_dps_packed", "packed", "op")  # durations must be known
KINDS = KERNEL_KINDS + ("builtin",)


@dataclass(frozen=True)
class Node:
    id: int  # position in program order, 0..n-1
    kernel: str  # PrimFunc / packed function / operator name
    inputs: tuple[int, ...] = ()  # ids of the nodes whose outputs this node reads
    kind: str = "call_tir"
    var: str = ""  # the Relax variable bound to the result (for messages)
    weight_bytes: int = 0  # bytes of matrix weights (constants, <= 2-D) the call reads in full
    activation_bytes: int = 0  # bytes of its non-constant tensor arguments (e2e.activations)

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"node {self.id}: unknown kind {self.kind!r}; kinds: {KINDS}")


@dataclass(frozen=True)
class Graph:
    nodes: tuple[Node, ...]

    def __post_init__(self):
        for i, node in enumerate(self.nodes):
            if node.id != i:
                raise ValueError(f"node ids must be 0..n-1 in order; position {i} has id {node.id}")
            for j in node.inputs:
                if not 0 <= j < len(self.nodes) or j == i:
                    raise ValueError(f"node {i} ({node.kernel}) reads unknown node {j}")

    def __len__(self) -> int:
        return len(self.nodes)

    def weight_bytes(self) -> int:
        """Bytes of matrix weights the calls read in full, over one inference."""
        return sum(node.weight_bytes for node in self.nodes)

    def activation_bytes(self) -> int:
        """Bytes of activations the calls read, over one inference."""
        return sum(node.activation_bytes for node in self.nodes)

    def kernel_calls(self) -> dict[str, int]:
        """{kernel: number of nodes calling it}, in first-call order (builtins included)."""
        out: dict[str, int] = {}
        for node in self.nodes:
            out[node.kernel] = out.get(node.kernel, 0) + 1
        return out

    def consumers(self) -> tuple[tuple[int, ...], ...]:
        """For each node, the ids of the nodes that read it."""
        out: list[list[int]] = [[] for _ in self.nodes]
        for node in self.nodes:
            for j in sorted(set(node.inputs)):
                out[j].append(node.id)
        return tuple(tuple(c) for c in out)

    def topological_order(self, priority: Mapping[int, float] | None = None) -> tuple[int, ...]:
        """Node ids in a dependency-respecting order: among the nodes whose inputs are all
        placed, the lowest `priority` first (default 0), ties by program order (id).
        Raises ValueError on a cycle."""
        prio = priority or {}
        missing = [len(set(n.inputs)) for n in self.nodes]
        consumers = self.consumers()
        ready = [(prio.get(n.id, 0.0), n.id) for n in self.nodes if missing[n.id] == 0]
        heapq.heapify(ready)
        order = []
        while ready:
            _, i = heapq.heappop(ready)
            order.append(i)
            for j in consumers[i]:
                missing[j] -= 1
                if missing[j] == 0:
                    heapq.heappush(ready, (prio.get(j, 0.0), j))
        if len(order) != len(self.nodes):
            stuck = sorted(set(range(len(self.nodes))) - set(order))[:5]
            raise ValueError(f"the graph has a cycle through nodes {stuck}")
        return tuple(order)


def _packed(symbol: str) -> tuple[str, str]:
    """A packed-function call: a VM builtin, or an external function that does real work."""
    return ("builtin" if symbol.startswith("vm.builtin.") else "packed"), symbol


def _call_kind(call, tvm) -> tuple[str, str]:
    """(kind, kernel name) of a Relax call."""
    from tvm import relax

    op = call.op
    if isinstance(op, tvm.ir.Op):
        name = op.name
        if name in ("relax.call_tir", "relax.call_tir_inplace", "relax.call_tir_with_grad"):
            return "call_tir", call.args[0].name_hint
        if name == "relax.call_dps_packed":
            callee = call.args[0]
            return "call_dps_packed", getattr(callee, "global_symbol", None) or str(callee)
        if name in ("relax.call_pure_packed", "relax.call_packed", "relax.call_inplace_packed"):
            callee = call.args[0]
            return _packed(getattr(callee, "global_symbol", None) or str(callee))
        if name in ("relax.reshape", "relax.memory.view", "relax.ensure_zero_offset",
                    "relax.null_value", "relax.shape_of", "relax.tensor_to_shape",
                    "relax.shape_to_tensor"):
            return "builtin", name  # e.g. vm.builtin.reshape: a view, no kernel, no copy
        return "op", name
    if isinstance(op, relax.ExternFunc):
        return _packed(op.global_symbol)
    if isinstance(op, relax.GlobalVar):
        return "op", op.name_hint  # a call to another Relax function
    return "op", str(op)


def _nbytes(shape, dtype) -> int:
    import numpy as np

    return int(np.prod([int(d) for d in shape], dtype=np.int64)) * np.dtype(str(dtype)).itemsize


def _gathered_params(prim_func) -> set[int]:
    """Indices of the parameters a PrimFunc reads at data-dependent positions (a block's read
    region whose bounds load from a buffer, as `take` reads an embedding table)."""
    from cdmpp.features.tir_tree import _has_load, _types  # the feature walker's load test

    ty = _types()
    # a parameter and the buffer it declares share their name (unique in a PrimFunc)
    index_of = {str(p.name): i for i, p in enumerate(prim_func.params)}
    gathered: set[int] = set()
    stack = [prim_func.body]
    while stack:
        stmt = stack.pop()
        if stmt is None:
            continue
        if isinstance(stmt, ty.SBlock):
            for region in stmt.reads:
                name = str(region.source.name)
                if name in index_of and any(_has_load(r.min, ty) for r in region.region):
                    gathered.add(index_of[name])
        if isinstance(stmt, ty.SeqStmt):
            stack.extend(stmt.seq)
            continue
        for attr in ("body", "block", "then_case", "else_case", "init"):
            child = getattr(stmt, attr, None)
            if child is not None and not callable(child):
                stack.append(child)
    return gathered


# a constant of more dimensions is a convolution's weights, which lose little in a network
MATRIX_WEIGHT_MAX_DIMS = 2


def _tir_args(call) -> list:
    """The tensor arguments of a `call_tir` (its second argument: one, or a tuple of them)."""
    from tvm import relax

    args = call.args[1]
    return list(args.fields) if isinstance(args, relax.Tuple) else [args]


def _weight_bytes(call, mod, tvm, gathered_of: dict) -> int:
    """Bytes of the matrix weights (constant arguments of at most `MATRIX_WEIGHT_MAX_DIMS`
    dimensions) a `call_tir` reads in full. `gathered_of`: callee name -> its gathered
    parameters, filled as callees are met (a kernel is called many times)."""
    consts = [(i, a) for i, a in enumerate(_tir_args(call)) if isinstance(a, tvm.ir.Constant)
              and len(a.ty.shape) <= MATRIX_WEIGHT_MAX_DIMS]
    if not consts:
        return 0
    callee = call.args[0]
    if callee.name_hint not in gathered_of:
        gathered_of[callee.name_hint] = set()
        if isinstance(mod, tvm.IRModule) and callee in mod.functions:
            func = mod[callee]
            if isinstance(func, tvm.tirx.PrimFunc):
                gathered_of[callee.name_hint] = _gathered_params(func)
    gathered = gathered_of[callee.name_hint]
    return sum(_nbytes(a.ty.shape, a.ty.dtype) for i, a in consts if i not in gathered)


def _activation_bytes(call, tvm) -> int:
    """Bytes of the tensors a `call_tir` reads that are not constants (activations), counting
    only those of static shape."""
    from tvm import relax

    total = 0
    for a in _tir_args(call):
        ty = a.ty
        if isinstance(a, tvm.ir.Constant) or not isinstance(ty, relax.TensorType):
            continue
        shape = getattr(ty, "shape", None)
        if shape is None or not all(isinstance(getattr(d, "value", None), int) for d in shape):
            continue  # a symbolic dimension: its size is not known here
        total += _nbytes(shape, ty.dtype)
    return total


def from_relax(mod, func_name: str = "main") -> Graph:
    """The dataflow graph of `mod[func_name]` (a Relax function; use the fused module)."""
    from cdmpp.tvm_env import import_tvm

    tvm = import_tvm()
    from tvm import relax

    func = mod[func_name] if isinstance(mod, tvm.IRModule) else mod
    if not isinstance(func, relax.Function):
        raise TypeError(f"{func_name} is a {type(func).__name__}, not a Relax function")
    body = func.body
    if not isinstance(body, relax.SeqExpr):
        raise ValueError(f"{func_name} is not in A-normal form (its body is not a SeqExpr)")
    producers: dict = {}  # relax Var -> frozenset of node ids whose outputs it may hold
    nodes: list[Node] = []
    gathered_of: dict[str, set[int]] = {}  # kernel -> parameters it gathers rows of

    def reads(expr) -> frozenset:
        ids: set = set()
        for v in relax.analysis.free_vars(expr):
            ids |= producers.get(v, frozenset())
        return frozenset(ids)

    for block in body.blocks:
        for binding in block.bindings:
            value = binding.value
            inputs = reads(value)
            kind = _call_kind(value, tvm) if isinstance(value, relax.Call) else None
            if kind is None:  # tuple, tuple item, alias, constant, match_cast: data only
                producers[binding.var] = inputs
                continue
            tir = kind[0] == "call_tir"
            weights = _weight_bytes(value, mod, tvm, gathered_of) if tir else 0
            activations = _activation_bytes(value, tvm) if tir else 0
            node = Node(len(nodes), kind[1], tuple(sorted(inputs)), kind[0],
                        binding.var.name, weights, activations)
            nodes.append(node)
            producers[binding.var] = frozenset((node.id,))
    return Graph(tuple(nodes))
