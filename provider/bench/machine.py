"""Where benchmark numbers come from: CPU, its vector instructions, cores, load, BLAS
threads, versions."""

from __future__ import annotations

import os
import platform
from datetime import datetime, timezone
from importlib import metadata

from provider import __version__

BLAS_VARIABLES = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
# /proc/cpuinfo flags that pick kernels, ours (fp32 AVX-512 or AVX2 widths, the int8 dot
# products) and onnxruntime's alike: the same code's ratios differ by them
VECTOR_FLAGS = {"avx512f": "AVX-512", "avx512_vnni": "AVX-512 VNNI", "avx_vnni": "AVX-VNNI",
                "avx2": "AVX2", "fma": "FMA"}


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo (platform.processor() elsewhere)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def vector_extensions() -> str:
    """The CPU's vector extensions among VECTOR_FLAGS ("unknown" without /proc/cpuinfo)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            flags = next((line.split(":", 1)[1].split() for line in f
                          if line.startswith("flags")), None)
    except OSError:
        flags = None
    if flags is None:
        return "unknown"
    found = [name for flag, name in VECTOR_FLAGS.items() if flag in flags]
    return ", ".join(found) if found else "none of " + ", ".join(VECTOR_FLAGS.values())


def describe() -> dict[str, str]:
    """A name -> value description of this machine and software, in report order."""
    load = os.getloadavg() if hasattr(os, "getloadavg") else (float("nan"),) * 3
    info = {
        "date (UTC)": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M"),
        "CPU": cpu_model(),
        "vector extensions": vector_extensions(),
        "cores": str(os.cpu_count()),
        "load average (1/5/15 min)": " / ".join(f"{x:.2f}" for x in load),
        "BLAS threads": ", ".join(f"{v}={os.environ.get(v, '(unset)')}" for v in BLAS_VARIABLES),
        "OS": f"{platform.system()} {platform.release()}",
        "Python": platform.python_version(),
    }
    info["litenpu"] = __version__
    for package in ("onnxruntime", "onnx", "numpy"):
        try:
            info[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            info[package] = "(not installed)"
    return info
