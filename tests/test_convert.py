"""converters.convert and `litenpu convert`: direction by extension, atomic writes,
summary, progress, and numerics of ONNX -> .ms -> ONNX files."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx_roundtrip import LIGHT, assert_close, random_feeds, run

import models
from converters import convert as convert_mod
from converters.convert import convert, register_reader
from converters.errors import UnsupportedError
from provider.cli import main


def _small_model():
    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((4, 3))
                                .astype(np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["h"]),
         helper.make_node("Sigmoid", ["h"], ["s"]),
         helper.make_node("Shrink", ["s"], ["y"], lambd=0.6)], "small",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 3])], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 8
    return model


def test_onnx_to_ms_to_onnx_files(tmp_path):
    src = tmp_path / "m.onnx"
    onnx.save(_small_model(), src)
    report = convert(src, tmp_path / "m.ms")
    assert report.mapped_count == 2 and [c.op for c in report.custom] == ["Shrink"]
    assert report.weight_bytes == 4 * 3 * 4
    back = convert(tmp_path / "m.ms", tmp_path / "back.onnx")
    assert back.mapped_count == 2 and len(back.custom) == 1
    original, exported = onnx.load(src), onnx.load(tmp_path / "back.onnx")
    feeds = random_feeds(original, dim=3)
    assert_close(run(exported, feeds), run(original, feeds))


def test_failed_conversion_leaves_no_file(tmp_path, monkeypatch):
    from converters.lite import reader

    src = tmp_path / "m.onnx"
    onnx.save(_small_model(), src)
    convert(src, tmp_path / "m.ms")
    model = reader.load(tmp_path / "m.ms")
    model.nodes[0].op = "Attention"  # a Lite op with no ONNX export
    monkeypatch.setitem(convert_mod.READERS, ".ms",
                        lambda p, prog: (model, convert_mod.ConversionReport()))
    before = set(tmp_path.iterdir())
    with pytest.raises(UnsupportedError, match="Attention"):
        convert(tmp_path / "m.ms", tmp_path / "out.onnx")
    assert set(tmp_path.iterdir()) == before


def test_existing_destination_is_untouched_on_failure(tmp_path):
    dst = tmp_path / "out.ms"
    dst.write_bytes(b"old")
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"not onnx")
    with pytest.raises(Exception, match="bad.onnx"):
        convert(bad, dst)
    assert dst.read_bytes() == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.onnx", "out.ms"]


def test_unknown_extensions_list_the_known_ones(tmp_path):
    src = tmp_path / "m.onnx"
    onnx.save(_small_model(), src)
    with pytest.raises(UnsupportedError, match=r"\.txt.*known: \.ms, \.onnx"):
        convert(src, tmp_path / "m.txt")
    with pytest.raises(UnsupportedError, match="known"):
        convert(tmp_path / "m.pb", tmp_path / "m.ms")


def test_reader_hook_rejects_duplicates():
    with pytest.raises(ValueError, match=".onnx"):
        register_reader(".onnx", lambda p, prog: None)


def test_progress_reaches_the_total(tmp_path):
    calls = []
    convert(LIGHT / "light_shufflenet.onnx", tmp_path / "s.ms",
            progress=lambda done, total: calls.append((done, total)))
    assert calls and calls[-1][0] == calls[-1][1] == 446
    assert [d for d, _ in calls] == sorted(d for d, _ in calls)


def test_cli_convert_both_ways_prints_a_summary(tmp_path, capsys):
    src = tmp_path / "m.onnx"
    onnx.save(_small_model(), src)
    assert main(["convert", str(src), "-o", str(tmp_path / "m.ms")]) == 0
    out = capsys.readouterr().out
    assert "ops mapped: 2" in out and "ops carried as Custom: 1" in out
    assert "weight bytes: 48" in out and "Shrink" in out
    assert main(["convert", str(tmp_path / "m.ms"), "-o", str(tmp_path / "m2.onnx")]) == 0
    assert (tmp_path / "m2.onnx").is_file()


def test_cli_errors_are_one_line(tmp_path, capsys):
    assert main(["convert", str(tmp_path / "missing.onnx"), "-o", str(tmp_path / "x.ms")]) == 1
    err = capsys.readouterr().err
    assert "missing.onnx" in err and "Traceback" not in err


def test_progress_line_only_for_large_models():
    import io

    from provider.commands.convert import PROGRESS_MIN_NODES, _ProgressLine

    stream = io.StringIO()
    line = _ProgressLine(stream)
    line(10, PROGRESS_MIN_NODES - 1)
    line.close()
    assert stream.getvalue() == ""
    line(64, 1000)
    line(1000, 1000)
    line.close()
    assert stream.getvalue() == "\rconverting: 64/1000 nodes\rconverting: 1000/1000 nodes\n"


def test_cli_layout_nhwc(tmp_path, capsys):
    from converters.lite import reader

    src = tmp_path / "r.onnx"
    onnx.save(models.build("resnet_block"), src)
    assert main(["convert", str(src), "-o", str(tmp_path / "r.ms"), "--layout", "nhwc", "-q"]) == 0
    lite = reader.load(tmp_path / "r.ms")
    assert {n.attrs["format"] for n in lite.nodes if n.op == "Conv2DFusion"} == {"NHWC"}
    with pytest.raises(UnsupportedError, match="layout 'NWHC'"):
        convert(src, tmp_path / "x.ms", layout="NWHC")
