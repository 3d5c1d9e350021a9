"""ONNX files into Relax, with the input dimensions a file leaves open bound first.

    net = load_onnx("model.onnx", batch=4)   # OnnxNetwork: .mod, .name, .batch, .input_shapes

Exported models often leave the batch dimension open (a symbol such as "N" or "batch_size").
Kernels with symbolic extents cannot be timed and their features describe no real size, so an
open LEADING dimension is bound to `batch` (1 if not given); an open dimension anywhere else (a
sequence length, say) cannot be guessed, and is an error naming it unless `shape_dict` gives
that input's shape. The bound shapes are then written into the model and the shape arithmetic
that depended on them folded to constants (`fold_static_shapes`), as TVM's importer needs.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class OnnxNetwork:
    mod: object  # the Relax IRModule, function "main"
    name: str  # the file's stem
    batch: int | None  # what open leading dimensions were bound to; None if none was open
    input_shapes: dict  # {input name: [int, ...]} as imported


def _onnx():
    try:
        import onnx
    except ImportError as e:
        from cdmpp.e2e.networks import BENCHMARK_NETWORKS

        raise RuntimeError("importing an ONNX model needs the `onnx` package, which is not "
                           "installed (pip install onnx); built-in networks work without it: "
                           f"--network {'|'.join(BENCHMARK_NETWORKS)}") from e
    return onnx


def input_dims(model) -> dict:
    """{input name: [dim, ...]} of an ONNX model's graph inputs (initializers are weights, not
    inputs); a dim is an int, or a str (its symbol, "?" if unnamed) where the file leaves it open."""
    weights = {init.name for init in model.graph.initializer}
    out = {}
    for value in model.graph.input:
        if value.name in weights:
            continue
        dims = []
        for d in value.type.tensor_type.shape.dim:
            dims.append(d.dim_value if d.HasField("dim_value") else (d.dim_param or "?"))
        out[value.name] = dims
    return out


def bound_shapes(dims: dict, batch: int | None = None,
                 shape_dict: dict | None = None) -> tuple[dict, int | None]:
    """({input: [int, ...]}, the batch bound or None): every open leading dimension set to
    `batch` (1 if None); `shape_dict` overrides whole inputs. Raises ValueError for an open
    dimension elsewhere, and for a `batch` that a model with fixed leading dimensions does not
    already have (it would be ignored)."""
    if batch is not None and batch < 1:
        raise ValueError(f"batch must be >= 1, got {batch}")
    given = dict(shape_dict or {})
    unknown = sorted(set(given) - set(dims))
    if unknown:
        raise ValueError(f"shape_dict names {unknown}, which are not inputs of the model "
                         f"(inputs: {sorted(dims)})")
    shapes, bound = {}, None
    for name, ds in dims.items():
        if name in given:
            shapes[name] = [int(d) for d in given[name]]
            continue
        shape = []
        for i, d in enumerate(ds):
            if isinstance(d, int):
                shape.append(d)
            elif i == 0:
                bound = batch or 1
                shape.append(bound)
            else:
                raise ValueError(
                    f"input {name!r} has dimension {i} open ({d!r} in {ds}): only the leading "
                    "(batch) dimension is bound by --batch. Export the model with that "
                    "dimension fixed, or give the input's shape in Python: "
                    "cdmpp.predict_network(import_onnx(path, "
                    f"shape_dict={{{name!r}: [...]}})), import_onnx from cdmpp.e2e.networks")
        shapes[name] = shape
    if batch is not None and bound is None:
        if shapes and all(s and s[0] == batch for s in shapes.values()):
            return shapes, batch  # the file's own batch, stated again
        raise ValueError(f"the model's inputs have fixed leading dimensions ({dims}): there is "
                         f"no open batch dimension for batch={batch} to set")
    return shapes, bound


def fold_static_shapes(model, shapes: dict) -> int:
    """Write `shapes` into the model's inputs and replace each top-level `Shape` node whose input
    shape is then fully known (ONNX shape inference) by a Constant; returns how many (0 where
    shape inference fails, and TVM's importer gets the model as it is). Exporters
    turn `x.size(0)` into Shape -> Gather -> ... arithmetic, which TVM's importer does not follow
    even when every input is bound (seen: BERT-base exported with a dynamic batch axis)."""
    import numpy as np
    import onnx
    from onnx import helper, numpy_helper

    for value in model.graph.input:
        if value.name in shapes:
            for d, n in zip(value.type.tensor_type.shape.dim, shapes[value.name]):
                d.dim_value = int(n)  # clears dim_param (a oneof)
    try:
        inferred = onnx.shape_inference.infer_shapes(model, data_prop=True)
    except Exception:  # noqa: BLE001 - e.g. a model over protobuf's 2 GB: left to the importer
        return 0
    known = {init.name: list(init.dims) for init in model.graph.initializer}
    for v in [*inferred.graph.value_info, *inferred.graph.input, *inferred.graph.output]:
        t = v.type.tensor_type
        if t.HasField("shape") and all(d.HasField("dim_value") for d in t.shape.dim):
            known[v.name] = [d.dim_value for d in t.shape.dim]
    nodes, folded = [], 0
    for node in model.graph.node:
        if node.op_type != "Shape" or node.input[0] not in known:
            nodes.append(node)
            continue
        dims = known[node.input[0]]
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        value = np.array(dims[attrs.get("start", 0):attrs.get("end", len(dims))], dtype=np.int64)
        nodes.append(helper.make_node("Constant", [], [node.output[0]], name=node.name,
                                      value=numpy_helper.from_array(value)))
        folded += 1
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    return folded


def existing_onnx_file(path) -> Path:
    """`path` as a Path; FileNotFoundError naming it if there is no such file."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"ONNX file {path} does not exist")
    return path


def load_onnx(path, batch: int | None = None, shape_dict: dict | None = None) -> OnnxNetwork:
    """The Relax IRModule of an ONNX file (needs the `onnx` package), its open dimensions
    bound as `bound_shapes` says."""
    path = existing_onnx_file(path)
    onnx = _onnx()
    try:
        model = onnx.load(str(path))
    except Exception as e:  # noqa: BLE001 - protobuf's own errors do not name the file
        raise ValueError(f"{path} is not a readable ONNX model: {type(e).__name__}: {e}") from e
    shapes, bound = bound_shapes(input_dims(model), batch, shape_dict)
    from cdmpp.tvm_env import import_tvm

    import_tvm()
    from tvm.relax.frontend.onnx import from_onnx

    fold_static_shapes(model, shapes)
    try:
        mod = from_onnx(model, shape_dict=shapes)
    except Exception as e:  # noqa: BLE001 - TVM's errors name neither the file nor a way out
        reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise RuntimeError(
            f"TVM's ONNX importer could not convert {path} (inputs {shapes}): {reason}") from e
    return OnnxNetwork(mod, path.stem, bound, shapes)
