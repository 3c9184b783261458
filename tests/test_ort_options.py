"""Provider options, provider-list normalisation, feed checks and partition grouping (no ORT session)."""

import numpy as np
import pytest

from provider.bindings import check_feeds
from provider.errors import BindingError, UnsupportedError
from provider.options import CompileOptions, InvalidOptionError, NpuOptions, PlacementOptions
from provider.ort.capability import group
from provider.session import normalize_providers


def test_options_parse_strings_like_onnxruntime_carries_them():
    options = NpuOptions.parse({"min_partition_nodes": "3", "disable_ops": "Conv, Gemm",
                                "enable_fp16": "1"})
    assert options == NpuOptions(PlacementOptions(3, ("Conv", "Gemm")), CompileOptions(True))
    assert NpuOptions.parse(options.to_strings()) == options
    assert NpuOptions().to_strings() == {}


def test_unknown_option_lists_the_valid_ones():
    with pytest.raises(InvalidOptionError) as info:
        NpuOptions.parse({"min_partition_node": "2"})
    message = str(info.value)
    assert "'min_partition_node'" in message
    assert all(key in message for key in NpuOptions.valid_keys())


@pytest.mark.parametrize("key, value", [("min_partition_nodes", "0"), ("min_partition_nodes", "x"),
                                        ("enable_fp16", "maybe"), ("disable_ops", 3),
                                        ("npu_threads", "-1"), ("npu_threads", True)])
def test_bad_option_values_name_the_key(key, value):
    with pytest.raises(InvalidOptionError, match=key):
        NpuOptions.parse({key: value})


def test_normalize_providers_accepts_onnxruntime_forms():
    npu, others = normalize_providers(["NPUExecutionProvider", "CPUExecutionProvider"],
                                      [{"min_partition_nodes": "2"}, {}])
    assert npu == NpuOptions(PlacementOptions(min_partition_nodes=2)) and others == ["CPUExecutionProvider"]
    npu, _ = normalize_providers([("NPUExecutionProvider", {"enable_fp16": True})], None)
    assert npu.compile.enable_fp16
    assert normalize_providers(["CPUExecutionProvider"], None)[0] is None
    with pytest.raises(UnsupportedError, match="CUDAExecutionProvider"):
        normalize_providers(["NPUExecutionProvider", "CUDAExecutionProvider"], None)
    with pytest.raises(InvalidOptionError, match="valid options"):
        normalize_providers(["NPUExecutionProvider"], [{"bogus": "1"}])


class _Meta:
    def __init__(self, name, type_, shape):
        self.name, self.type, self.shape = name, type_, shape


def test_check_feeds_names_the_bad_input():
    metas = [_Meta("x", "tensor(float)", ["N", 3]), _Meta("y", "tensor(int64)", [2])]
    check_feeds(metas, {"x": np.zeros((5, 3), np.float32), "y": np.zeros(2, np.int64)})
    with pytest.raises(BindingError, match="input 'x'.*shape"):
        check_feeds(metas, {"x": np.zeros((5, 4), np.float32), "y": np.zeros(2, np.int64)})
    with pytest.raises(BindingError, match="input 'y'.*dtype int64"):
        check_feeds(metas, {"x": np.zeros((1, 3), np.float32), "y": np.zeros(2, np.int32)})
    with pytest.raises(BindingError, match=r"missing input\(s\) \['y'\]"):
        check_feeds(metas, {"x": np.zeros((1, 3), np.float32)})


def test_check_feeds_judges_lists_by_shape_only():
    """onnxruntime casts a list to the input's dtype, so a list of the right shape passes
    (a run that fails for another reason must keep that reason, not a dtype complaint)."""
    metas = [_Meta("x", "tensor(float)", ["N", 3]), _Meta("y", "tensor(int64)", [2])]
    check_feeds(metas, {"x": [[0.5, 1.0, 2.0]], "y": [1.0, 2.0]})
    with pytest.raises(BindingError, match=r"input 'x'.*shape \['\?', 3\], got \[1, 2\]"):
        check_feeds(metas, {"x": [[0.5, 1.0]], "y": [1, 2]})
    with pytest.raises(BindingError, match="input 'x': a ragged sequence"):
        check_feeds(metas, {"x": [[0.5, 1.0, 2.0], [1.0]], "y": [1, 2]})
    with pytest.raises(BindingError, match="input 'y': a NoneType is not a tensor"):
        check_feeds(metas, {"x": [[0.5, 1.0, 2.0]], "y": None})
    with pytest.raises(BindingError, match="input 'y': a str is not a tensor"):
        check_feeds(metas, {"x": [[0.5, 1.0, 2.0]], "y": "12"})
    # a sequence-of-maps input takes a list of dicts: not judged as a tensor
    seq = [*metas, _Meta("m", "seq(map(int64,tensor(float)))", [])]
    check_feeds(seq, {"x": [[0.5, 1.0, 2.0]], "y": [1, 2], "m": [{1: 0.5}, {2: 0.25}]})


# Graphs as (inputs, outputs) per node in topological order; S = NPU-supported.
def test_group_chain_is_one_partition():
    ins, outs = [["x"], ["a"], ["b"]], [["a"], ["b"], ["c"]]
    assert group(ins, outs, [True, True, True]) == [[0, 1, 2]]


def test_group_splits_around_a_cpu_detour():
    # 0:S a -> 1:CPU b -> 2:S reads a and b. Fusing 0 and 2 would make a cycle through 1.
    ins, outs = [["x"], ["a"], ["a", "b"]], [["a"], ["b"], ["c"]]
    assert group(ins, outs, [True, False, True]) == [[0], [2]]


def test_group_keeps_independent_cpu_nodes_out_of_the_way():
    # 0:S, 1:CPU on a graph input (independent of 0), 2:S after 0, 3:S reads 1 and 2.
    ins, outs = [["x"], ["y"], ["a"], ["b", "c"]], [["a"], ["b"], ["c"], ["d"]]
    assert group(ins, outs, [True, False, True, True]) == [[0, 2, 3]]


def test_group_nothing_supported():
    assert group([["x"]], [["y"]], [False]) == []
