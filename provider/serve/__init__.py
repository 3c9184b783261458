"""Serving at scale: the NPU EP inside Ray Serve replicas (docs/serving.md).

`deployment(model_path, provider_options, num_replicas=...)` is a Ray Serve application
whose replicas each register the NPU EP and hold one session (warm from a shared compile
cache). `app` builds it; `replica` is what each replica holds (Ray-free); `protocol` is its
JSON over HTTP; `load` is a bounded HTTP load test that checks every answer against
onnxruntime CPU.
Ray Serve is an optional extra: `pip install litenpu[serve]`.
"""

from __future__ import annotations

from typing import Any

INSTALL = "Ray Serve is not installed (pip install litenpu[serve])"


def ray_serve_missing() -> str | None:
    """Why Ray Serve cannot be used here, or None when it can."""
    try:
        import ray.serve  # noqa: F401
        import starlette  # noqa: F401
    except ImportError as e:
        return f"{INSTALL}: {e}"
    return None


def deployment(*args: Any, **kwargs: Any) -> Any:
    """`provider.serve.app.deployment` (ImportError saying what to install without Ray)."""
    missing = ray_serve_missing()
    if missing:
        raise ImportError(missing)
    from provider.serve.app import deployment as build

    return build(*args, **kwargs)
