"""Device memory and peak RSS of four different models resident together.

The three `models/` (mobilenet_v2, resnet_block, transformer_encoder) and onnx's light
squeezenet (seeded random weights, as in the tests) are loaded as NPU sessions and run
once each, in four memory modes: default (one arena per model), one internal memory group,
group + shared weights, and the same four models in plain onnxruntime CPU sessions. A second
scenario adds each model again at batch 2 (8 sessions), where shared weights pay off. Every
mode runs in a fresh process, so peak RSS (ru_maxrss, the pool's touched shared pages
included) is that mode's alone.

Prints the table, writes docs/benchmarks/memory.md and, with matplotlib (`pip install
litenpu[bench]`), docs/benchmarks/memory.png.

    python3 benchmarks/bench_memory.py
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys

import numpy as np
import onnx
import onnxruntime as ort

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir))
sys.path[:0] = [ROOT, os.path.join(ROOT, "tests")]

from npu_oracle import randomized  # noqa: E402

LIGHT = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")
MODELS = ["mobilenet_v2", "resnet_block", "transformer_encoder", "squeezenet"]
MODES = {  # mode -> NPU provider options (None: plain onnxruntime CPU)
    "onnxruntime CPU": None,
    "NPU default": {},
    "NPU internal group": {"internal_memory_group": "bench"},
    "NPU group + shared weights": {"internal_memory_group": "bench", "share_weights": "1"},
}
SCENARIOS = {"4 models, batch 1": (1,), "4 models at batch 1 and 2 (8 sessions)": (1, 2)}
OUT = os.path.join(ROOT, "docs", "benchmarks")


def model_bytes(name: str) -> bytes:
    """The model with a free batch dim (squeezenet's is fixed at 1 in the file)."""
    if name != "squeezenet":
        return onnx.load(os.path.join(ROOT, "models", f"{name}.onnx")).SerializeToString()
    model = randomized(onnx.load(os.path.join(LIGHT, "light_squeezenet.onnx")))
    for value in (*model.graph.input, *model.graph.output):
        value.type.tensor_type.shape.dim[0].dim_param = "batch"
    return model.SerializeToString()


def worker(mode: str, batches: tuple[int, ...]) -> dict:
    """Create and run every session of a scenario in one mode; memory numbers as a dict."""
    import provider
    from provider.npu.memory import default_pool
    from provider.npu.weights import weight_store

    npu = MODES[mode]
    sessions = []
    for name in MODELS:
        model = model_bytes(name)
        for batch in batches:
            options = ort.SessionOptions()
            options.add_free_dimension_override_by_name("batch", batch)
            options.log_severity_level = 3  # squeezenet's unused-initializer warnings
            if npu is None:
                sess = ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])
            else:
                sess = provider.InferenceSession(
                    model, options, providers=[("NPUExecutionProvider", npu), "CPUExecutionProvider"])
            meta = sess.get_inputs()[0]
            shape = [batch, *meta.shape[1:]]
            sess.run(None, {meta.name: np.random.default_rng(0).standard_normal(shape).astype(np.float32)})
            sessions.append(sess)
    result = {"peak_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}
    if npu is not None:
        infos = [s.memory_info() for s in sessions]  # now: the group's arena has its final size
        grouped = "internal_memory_group" in npu  # every member reports the one arena
        result.update(
            device=default_pool().stats().in_use,
            internal=infos[0].device_internal if grouped else sum(i.device_internal for i in infos),
            internal_unshared=sum(i.internal for i in infos),
            weights=weight_store().stats()[1] if npu.get("share_weights")
            else sum(i.device_weights for i in infos),
            staging=sum(i.device_staging for i in infos))
    return result


def run_all() -> dict[str, dict[str, dict]]:
    results: dict[str, dict[str, dict]] = {}
    for scenario, batches in SCENARIOS.items():
        for mode in MODES:
            out = subprocess.run([sys.executable, __file__, "--worker", mode, ",".join(map(str, batches))],
                                 check=True, capture_output=True, text=True)
            results.setdefault(scenario, {})[mode] = json.loads(out.stdout.strip().splitlines()[-1])
    return results


def mib(n: int | None) -> str:
    return "-" if n is None else f"{n / 2**20:.1f}"


def table(results: dict[str, dict[str, dict]]) -> str:
    lines = []
    for scenario, modes in results.items():
        lines += [f"### {scenario}", "",
                  "| mode | device total MiB | internal MiB | weights MiB | staging MiB | peak RSS MiB |",
                  "|---|---:|---:|---:|---:|---:|"]
        for mode, r in modes.items():
            lines.append(f"| {mode} | {mib(r.get('device'))} | {mib(r.get('internal'))} | "
                         f"{mib(r.get('weights'))} | {mib(r.get('staging'))} | {mib(r['peak_rss'])} |")
        default, group = modes["NPU default"], modes["NPU internal group"]
        lines += ["", f"internal memory, default / group: {default['internal'] / group['internal']:.2f}x "
                      f"(goal >= 3x; a group's arena is its largest member's, so the ratio is at most "
                      f"sum / max of the members' arenas); weights, default / shared: "
                      f"{default['weights'] / max(modes['NPU group + shared weights']['weights'], 1):.2f}x", ""]
    return "\n".join(lines)


def plot(results: dict[str, dict[str, dict]], path: str) -> bool:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed (pip install litenpu[bench]): no plot written")
        return False
    fig, axes = plt.subplots(1, len(results), figsize=(6 * len(results), 4.5))
    for ax, (scenario, modes) in zip(np.atleast_1d(axes), results.items(), strict=True):
        names = [m for m in modes if m != "onnxruntime CPU"]
        x = np.arange(len(names))
        for k, (field, label) in enumerate((("internal", "internal"), ("weights", "weights"),
                                            ("device", "device total"))):
            ax.bar(x + (k - 1) * 0.27, [modes[m][field] / 2**20 for m in names], 0.27, label=label)
        ax.plot(x, [modes[m]["peak_rss"] / 2**20 for m in names], "k^", label="peak RSS")
        ax.axhline(modes["onnxruntime CPU"]["peak_rss"] / 2**20, color="grey", ls="--",
                   label="onnxruntime CPU peak RSS")
        ax.set_xticks(x, [n.replace("NPU ", "") for n in names])
        ax.set_ylabel("MiB")
        ax.set_title(scenario)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    return True


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worker", nargs=2, metavar=("MODE", "BATCHES"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        mode, batches = args.worker
        print(json.dumps(worker(mode, tuple(int(b) for b in batches.split(",")))))
        return
    results = run_all()
    text = table(results)
    print(text)
    os.makedirs(OUT, exist_ok=True)
    png = os.path.join(OUT, "memory.png")
    plotted = plot(results, png)
    with open(os.path.join(OUT, "memory.md"), "w") as f:
        f.write("# Memory of four models resident together\n\n"
                "`python3 benchmarks/bench_memory.py` (models: " + ", ".join(MODELS) + "; each "
                "mode in a fresh process; device = NPU pool bytes in use after one run of each "
                "session; internal = arena bytes, a group's arena counted once).\n\n" + text)
        if plotted:
            f.write("\n![memory](memory.png)\n")


if __name__ == "__main__":
    main()
