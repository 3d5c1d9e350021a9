"""ONNX files into Relax: open dimensions bound, kernels fused as for PyTorch, same numbers."""

from __future__ import annotations

import sys

import numpy as np
import pytest
from e2e_helpers import device  # noqa: F401  (fixtures)

from cdmpp.e2e.onnx_model import bound_shapes


def test_an_open_leading_dimension_is_bound_to_the_batch():
    dims = {"x": ["N", 32], "mask": ["batch", 7]}
    assert bound_shapes(dims) == ({"x": [1, 32], "mask": [1, 7]}, 1)
    assert bound_shapes(dims, 4) == ({"x": [4, 32], "mask": [4, 7]}, 4)
    assert bound_shapes({"x": [2, 8]}) == ({"x": [2, 8]}, None)  # nothing open, nothing said
    assert bound_shapes({"x": [2, 8]}, 2) == ({"x": [2, 8]}, 2)  # the file's own batch
    given = {"ids": [3, 128]}  # the caller's shape for an input with two open dimensions
    assert bound_shapes({"ids": ["N", "seq"]}, shape_dict=given) == (given, None)
    assert bound_shapes({"ids": ["N", "seq"]}, 3, shape_dict=given) == (given, 3)


def test_what_cannot_be_bound_is_an_error_naming_it():
    with pytest.raises(ValueError, match=r"'ids' has dimension 1 open \('seq'.*"
                                         r"import_onnx\(path, shape_dict=\{'ids': \[...\]\}\)"):
        bound_shapes({"ids": ["N", "seq"]}, 2)
    with pytest.raises(ValueError, match="no open batch dimension for batch=4"):
        bound_shapes({"x": [2, 8]}, 4)  # --batch would be ignored
    with pytest.raises(ValueError, match=r"not inputs of the model \(inputs: \['x'\]\)"):
        bound_shapes({"x": ["N", 8]}, shape_dict={"y": [1, 8]})
    with pytest.raises(ValueError, match="batch must be >= 1"):
        bound_shapes({"x": ["N", 8]}, 0)


def test_onnx_mlp_is_fused_like_the_torch_one_and_computes_the_same(tmp_path, device,
                                                                   tiny_onnx):
    from cdmpp.e2e.kernels import lower_network
    from cdmpp.e2e.measure import VMProgram
    from cdmpp.e2e.onnx_model import load_onnx
    from cdmpp.features import extract
    from cdmpp.tvm_env import import_tvm

    tvm = import_tvm()
    path = tmp_path / "mlp.onnx"
    w1, b1, w2 = tiny_onnx(path, batch="N")
    net = load_onnx(path, batch=3)
    assert (net.name, net.batch, net.input_shapes) == ("mlp", 3, {"x": [3, 32]})
    assert [int(d) for d in net.mod["main"].params[0].ty.shape] == [3, 32]
    lowered = lower_network(net.mod, device.target, name=net.name, batch=net.batch)
    names = [k.name for k in lowered.kernels]
    assert len(names) == 2 and "relu" in names[0] and "relu" not in names[1]
    for k in lowered.kernels:  # real, static kernels: features with their leaves
        assert extract(k.func, device.target).n_leaves() >= 1
    x = np.random.default_rng(1).standard_normal((3, 32)).astype(np.float32)
    out = VMProgram(lowered.build(), [tvm.runtime.tensor(x, tvm.cpu())]).run()
    got = (out[0] if not hasattr(out, "numpy") else out).numpy()
    np.testing.assert_allclose(got, np.maximum(x @ w1.T + b1, 0) @ w2.T, rtol=1e-4, atol=1e-4)


def test_onnx_import_errors_name_the_file_and_the_missing_package(tmp_path, monkeypatch):
    from cdmpp.e2e.networks import import_onnx

    with pytest.raises(FileNotFoundError, match="missing.onnx"):
        import_onnx(tmp_path / "missing.onnx")
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"not a protobuf")
    pytest.importorskip("onnx")
    with pytest.raises(ValueError, match="bad.onnx is not a readable ONNX model"):
        import_onnx(bad)
    monkeypatch.setitem(sys.modules, "onnx", None)  # as if it were not installed
    with pytest.raises(RuntimeError, match="needs the `onnx` package"):
        import_onnx(bad)


def _flatten_model(shape_start=None):
    """x (N, 4, 8) -> Reshape to (x.shape[0], 32) computed by Shape -> Gather -> Concat, as
    exporters write `x.view(x.size(0), -1)` -> MatMul W (32, 16)."""
    pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper

    w = np.random.default_rng(0).standard_normal((32, 16)).astype(np.float32)
    consts = [numpy_helper.from_array(w, "W"), numpy_helper.from_array(np.array([0]), "axes"),
              numpy_helper.from_array(np.array(0), "idx"),
              numpy_helper.from_array(np.array([32]), "rest")]
    shape_attrs = {} if shape_start is None else {"start": shape_start}
    nodes = [helper.make_node("Shape", ["x"], ["s"], **shape_attrs),
             helper.make_node("Gather", ["s", "idx"], ["n"], axis=0),
             helper.make_node("Unsqueeze", ["n", "axes"], ["n1"]),
             helper.make_node("Concat", ["n1", "rest"], ["shape"], axis=0),
             helper.make_node("Reshape", ["x", "shape"], ["flat"]),
             helper.make_node("MatMul", ["flat", "W"], ["y"])]
    graph = helper.make_graph(
        nodes, "flatten", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 16])], consts)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), w


def test_shape_arithmetic_on_bound_inputs_is_folded_to_constants(tmp_path, device):
    import onnx
    from onnx import numpy_helper

    from cdmpp.e2e.kernels import lower_network
    from cdmpp.e2e.measure import VMProgram
    from cdmpp.e2e.onnx_model import fold_static_shapes, load_onnx
    from cdmpp.tvm_env import import_tvm

    model, w = _flatten_model()
    assert fold_static_shapes(model, {"x": [3, 4, 8]}) == 1
    const = model.graph.node[0]
    assert const.op_type == "Constant" and const.output[0] == "s"
    assert numpy_helper.to_array(const.attribute[0].t).tolist() == [3, 4, 8]
    assert [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim] == [3, 4, 8]
    sliced, _ = _flatten_model(shape_start=1)  # Shape's start attribute is honoured
    fold_static_shapes(sliced, {"x": [3, 4, 8]})
    assert numpy_helper.to_array(sliced.graph.node[0].attribute[0].t).tolist() == [4, 8]

    path = tmp_path / "flatten.onnx"
    onnx.save(_flatten_model()[0], str(path))
    tvm = import_tvm()
    net = lower_network(load_onnx(path, batch=3).mod, device.target)
    x = np.random.default_rng(2).standard_normal((3, 4, 8)).astype(np.float32)
    out = VMProgram(net.build(), [tvm.runtime.tensor(x, tvm.cpu())]).run()
    got = (out[0] if not hasattr(out, "numpy") else out).numpy()
    np.testing.assert_allclose(got, x.reshape(3, 32) @ w, rtol=1e-4, atol=1e-4)
