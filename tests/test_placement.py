"""The placement summary: counts, and CPU nodes grouped by reason (names quoted in a reason
do not split a group)."""

from provider.placement import NodePlacement, PlacementSummary, reason_group


def test_groups_cpu_nodes_by_reason_biggest_first():
    nodes = [NodePlacement("conv", "Conv", "NPU", 0), NodePlacement("relu", "Relu", "NPU", 1),
             *(NodePlacement(f"reshape_{i}", "Reshape", "CPU", None,
                             f"Reshape: input 1 ('shape_{i}') is computed at run time")
               for i in range(4)),
             NodePlacement("topk", "TopK", "CPU", None, "TopKFusion: not in the NPU's set")]
    summary = PlacementSummary.of(nodes, ["bad graph"])
    assert (summary.nodes, summary.npu_nodes, summary.partitions) == (7, 2, 2)
    assert summary.reasons == {
        "Reshape: Reshape: input 1 (…) is computed at run time": 4,
        "TopK: TopKFusion: not in the NPU's set": 1}
    assert summary.text().splitlines() == [
        "NPUExecutionProvider: 2 of 7 nodes on the NPU in 2 partition(s), 5 on CPU",
        "  CPU  4 x Reshape: Reshape: input 1 (…) is computed at run time "
        "(reshape_0, reshape_1, reshape_2, ...)",
        "  CPU  topk (TopK): TopKFusion: not in the NPU's set",
        "  graph not claimed: bad graph"]
    assert summary.brief().startswith("2 partition(s), 2/7 nodes on the NPU; CPU: 4x Reshape")


def test_reason_group_elides_quoted_names():
    assert reason_group("Gather", "dtype int64 of 'ids'") == "Gather: dtype int64 of …"
