"""The Ray Serve application behind `provider.serve.deployment()`: replicas that each hold an
NPU session on one model (`provider.serve.replica.Replica`) and answer the JSON of
`provider.serve.protocol` over HTTP: POST runs the model, GET describes the replica.

Needs Ray Serve (`pip install litenpu[serve]`); `provider.serve` imports this module only
when `deployment` is asked for, and says what to install when Ray is absent.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ray import serve
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from provider.options import NpuOptions
from provider.serve.replica import Replica

NAME = "litenpu"


class NpuDeployment:
    """One Serve replica: a Replica named by Ray's replica id."""

    def __init__(self, model_path: str, provider_options: dict[str, str], npu: bool,
                 threads: int | None) -> None:
        replica_id = serve.get_replica_context().replica_id.unique_id
        self.replica = Replica(model_path, provider_options, npu=npu, threads=threads,
                               replica_id=replica_id)

    async def __call__(self, request: Request) -> Response:
        if request.method == "GET":
            return JSONResponse(self.replica.info())
        # The session runs on this replica's event loop: one request at a time per replica
        # (its NPU part would serialize concurrent runs anyway); replicas add throughput.
        status, body = self.replica.infer(await request.body())
        return Response(body, status_code=status, media_type="application/json")


def deployment(model_path: str | Path, provider_options: dict[str, str] | None = None, *,
               num_replicas: int = 1, npu: bool = True, threads: int | None = None,
               name: str = NAME, ray_actor_options: dict[str, Any] | None = None,
               **deployment_options: Any) -> serve.Application:
    """A Ray Serve application of `num_replicas` replicas of the NPU EP on `model_path` (the
    same absolute path on every node) with `provider_options` (checked here, once);
    `npu=False` serves onnxruntime's CPU provider instead (a baseline). `threads` caps the
    cores each replica's session uses; `ray_actor_options` defaults to one CPU per replica;
    `deployment_options` go to `serve.deployment` (e.g. `max_ongoing_requests`)."""
    path = Path(model_path).resolve()
    if not path.is_file():
        raise FileNotFoundError(f"model {model_path}: no such file")
    options = dict(provider_options or {})
    if npu:
        NpuOptions.parse(options)  # InvalidOptionError now, not in every replica
    if threads is not None and threads < 1:
        raise ValueError(f"threads={threads}: expected at least 1")
    app = serve.deployment(NpuDeployment, name=name, num_replicas=num_replicas,
                           ray_actor_options=ray_actor_options or {"num_cpus": 1},
                           **deployment_options)
    return app.bind(str(path), options, npu, threads)


def build_app(args: dict[str, str]) -> serve.Application:
    """An application builder for Serve's CLI and config files (`serve run
    provider.serve.app:build_app model_path=... cache_dir=... model_name=...`): the keys
    `model_path`, `num_replicas`, `threads`, `npu` ("0" for onnxruntime CPU) go to
    `deployment`, every other key is an NPU provider option."""
    options = dict(args)
    if "model_path" not in options:
        raise ValueError(f"build_app: expected a model_path argument; got {sorted(options)}")
    path = options.pop("model_path")
    count = int(options.pop("num_replicas", 1))
    threads = options.pop("threads", None)
    npu = str(options.pop("npu", "1")).lower() not in ("0", "false", "no")
    return deployment(path, options, num_replicas=count, npu=npu,
                      threads=int(threads) if threads else None)
