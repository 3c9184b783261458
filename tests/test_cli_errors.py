"""The CLI's one mapping of errors to exit codes: a bad model file is exit 1 with one line on
stderr for every command (inspect and convert alike), a bug in litenpu exit 2."""

from __future__ import annotations

import logging
import os
import subprocess
import sys

import numpy as np
import onnx
import pytest
from children import child_env
from onnx import TensorProto, helper, numpy_helper
from onnxruntime.capi.onnxruntime_pybind11_state import EPFail, Fail, InvalidGraph

from converters.errors import InvalidModelError, UnsupportedError
from provider.cli import error_line, exit_code, main
from provider.errors import BindingError, DeviceMemoryError, UsageError


def _relu_model(**graph) -> onnx.ModelProto:
    nodes = graph.pop("nodes", [helper.make_node("Relu", ["x"], ["y"], name="relu")])
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])], **graph)
    return _ir8(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))


def _ir8(model: onnx.ModelProto) -> onnx.ModelProto:
    model.ir_version = 8  # onnxruntime 1.23 loads up to IR 11
    return model


def _one_error_line(capfd, command: str) -> str:
    """The whole of stderr (Python's and onnxruntime's native writes): one error line."""
    err = capfd.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"litenpu {command}: error: "), err
    return err


def test_inspect_of_a_corrupt_onnx_file_is_one_line(tmp_path, capfd):
    path = tmp_path / "bad.onnx"
    path.write_bytes(_relu_model().SerializeToString()[:-9])  # protobuf's DecodeError
    assert main(["inspect", str(path)]) == 1
    assert "bad.onnx: not a readable ONNX model: DecodeError" in _one_error_line(capfd, "inspect")
    assert main(["convert", str(path), "-o", str(tmp_path / "out.ms")]) == 1
    assert "not a readable ONNX model" in _one_error_line(capfd, "convert")
    assert not (tmp_path / "out.ms").exists()


def test_a_model_onnxruntime_refuses_is_exit_1_without_its_error_log(tmp_path, capfd):
    """onnx.checker passes it; onnxruntime's CPU kernel refuses it while the session is
    created, and logged the error natively before raising it."""
    pool = helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=[2, 2], pads=[3, 0, 0, 0])
    g = helper.make_graph([pool], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 4, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    path = tmp_path / "pool.onnx"
    onnx.save(_ir8(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])), path)
    assert main(["inspect", str(path), "--option", "disable_ops=AveragePool"]) == 1
    line = _one_error_line(capfd, "inspect")
    assert "Pad should be smaller than kernel" in line and "[ONNXRuntimeError]" not in line


def test_an_error_onnxruntime_echoes_a_huge_attribute_into_is_one_readable_line(tmp_path, capfd):
    """A fuzzed .ms file's Transpose got a perm of 36,000 values, which onnxruntime's refusal
    repeats whole: the line keeps its start and end, the middle cut out and counted."""
    perm = list(range(5000, 0, -1))
    node = helper.make_node("Transpose", ["x"], ["y"], name="tr", perm=perm)
    g = helper.make_graph([node], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 1, 64])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    path = tmp_path / "perm.onnx"
    onnx.save(_ir8(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])), path)
    assert main(["inspect", str(path)]) == 1
    line = _one_error_line(capfd, "inspect")
    assert len(line) < 1100 and "(Transpose)" in line and "characters cut] ..." in line
    assert line.rstrip().endswith(", 2, 1}") or "1, 1, 1, 64" in line[-200:]


def test_non_utf8_names_are_one_line_and_nothing_is_written(tmp_path, capfd):
    path = tmp_path / "m.onnx"
    nodes = [helper.make_node("Relu", ["x"], ["mid"], name="relu"),
             helper.make_node("Neg", ["mid"], ["y"], name="neg")]
    data = _relu_model(nodes=nodes).SerializeToString().replace(b"mid", b"m\xc3d")
    path.write_bytes(data)
    for argv in (["inspect", str(path)], ["convert", str(path), "-o", str(tmp_path / "o.ms")]):
        assert main(argv) == 1  # was UnicodeDecodeError from onnx.checker: exit 2
        assert "NodeProto.output is not valid UTF-8" in _one_error_line(capfd, argv[0])
    assert sorted(os.listdir(tmp_path)) == ["m.onnx"]


def test_inspect_summary_of_unknown_dtypes_and_negative_dims(tmp_path, capfd):
    model = _relu_model(initializer=[numpy_helper.from_array(np.ones(2, np.float32), "w")])
    model.graph.input[0].type.tensor_type.elem_type = 99
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    assert main(["inspect", "--no-placement", str(path)]) == 0  # was KeyError: exit 2
    assert "x  ?        [2]" in capfd.readouterr().out
    model.graph.initializer[0].dims[0] = -2
    onnx.save(model, path)
    assert main(["inspect", "--no-placement", str(path)]) == 1
    assert "initializer 'w' has negative dims [-2]" in _one_error_line(capfd, "inspect")


@pytest.mark.parametrize("error, code", [
    (InvalidModelError("m.onnx: bad"), 1),
    (UnsupportedError("op"), 1),
    (UsageError("--dim"), 1),
    (BindingError("input"), 1),
    (DeviceMemoryError("pool"), 1),
    (FileNotFoundError("m.onnx: no such model file"), 1),
    (OSError(28, "No space left on device", "out.ms"), 1),
    (Fail("[ONNXRuntimeError] : 1 : FAIL : Load model from m.onnx failed: Type Error"), 1),
    (InvalidGraph("[ONNXRuntimeError] : 10 : INVALID_GRAPH : bad"), 1),
    (EPFail("[ONNXRuntimeError] : 11 : EP_FAIL : NPUExecutionProvider Ep.Compile: "
            "DeviceMemoryError: device pool exhausted"), 1),
    (EPFail("... Status Message: NPUExecutionProvider NodeComputeInfo.Compute: "
            "InvalidModelError: group -2"), 1),
    (EPFail("NPUExecutionProvider Ep.Compile: KeyError: 'x'"), 2),
    (KeyError("x"), 2),
    (RuntimeError("kaboom"), 2),
    (OSError("no file involved"), 2),
])
def test_exit_codes_are_one_mapping(error, code):
    assert exit_code(error) == code


def test_error_line_is_one_line_without_onnxruntimes_status_prefix():
    error = Fail("[ONNXRuntimeError] : 1 : FAIL : Load model failed:\nGraph output (y)\n  missing")
    assert error_line(error) == "onnxruntime Fail: Load model failed: Graph output (y) missing"
    assert error_line(InvalidModelError("a\n\n==> Context: b")) == "a ==> Context: b"
    wrapped = InvalidModelError("model 'm.onnx': onnxruntime cannot load it: [ONNXRuntimeError]"
                                " : 10 : INVALID_GRAPH : bad")
    assert error_line(wrapped) == "model 'm.onnx': onnxruntime cannot load it: bad"


def test_logged_tracebacks_and_warnings_are_one_line_each(tmp_path):
    """What the CLI's stderr looks like when an EP callback logs an exception it turned into
    a status (the CLI then prints the error itself): one line per record."""
    code = """if True:
        import logging, warnings
        from provider.cli import _configure_logging
        _configure_logging(False)
        try:
            raise ValueError("inner")
        except ValueError:
            logging.getLogger("litenpu.ort").exception("Ep.Compile failed:\\n  ValueError")
        warnings.warn("divide by zero", RuntimeWarning)
    """
    env = child_env()
    done = subprocess.run([sys.executable, "-c", code], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)
    lines = done.stderr.splitlines()
    assert len(lines) == 2 and "Traceback" not in done.stderr, done.stderr
    assert lines[0] == "ERROR litenpu.ort: Ep.Compile failed: ValueError"
    assert lines[1].startswith("WARNING py.warnings: ") and "divide by zero" in lines[1]


def test_debug_keeps_the_traceback_of_a_logged_exception():
    from provider.cli import LOG_FORMAT, _OneLineFormatter

    try:
        raise ValueError("inner")
    except ValueError:
        record = logging.LogRecord("t", logging.ERROR, __file__, 1, "failed", None, sys.exc_info())
    assert _OneLineFormatter(LOG_FORMAT).format(record) == "ERROR t: failed"
    assert "Traceback" in logging.Formatter(LOG_FORMAT).format(record)  # --debug's formatter
