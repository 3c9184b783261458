"""What one serving replica holds: a session on the model and the answers to HTTP requests.

Free of Ray (the Serve deployment in `provider.serve.deployment` wraps it), so it runs and is
tested anywhere. A replica's NPU session is a `provider.InferenceSession`, which registers
the NPU EP in the replica's process; with `cache_dir` and `model_name` in the provider
options a replica starts warm from the compile cache (`info()` says whether it did).
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import onnxruntime as ort

from provider.errors import BindingError
from provider.ort import EP_NAME
from provider.ort.tensors import ORT_TYPE_TO_NUMPY
from provider.serve.protocol import RequestError, decode_request, encode_error, encode_response
from provider.session import CPU_EP, InferenceSession

WARM = {"hit", "context"}  # partition statuses that compiled nothing (provider.cache.PartitionCacheStats)


class Replica:
    """A session on `model_path`: the NPU EP with `provider_options` (CPU for what it does
    not take), or onnxruntime's CPU provider alone with `npu=False` (the baseline). With
    `threads`, the NPU's `npu_threads` (unless the options set it) and onnxruntime's
    intra-op threads are capped at that many cores (replicas sharing a node split its cores).
    """

    def __init__(self, model_path: str, provider_options: dict[str, str] | None = None, *,
                 npu: bool = True, threads: int | None = None, replica_id: str = "") -> None:
        self.model = os.path.basename(model_path)
        self.replica_id = replica_id or f"pid-{os.getpid()}"
        options = ort.SessionOptions()
        if threads:
            options.intra_op_num_threads = threads
        self.npu = npu
        if npu:
            npu_options = dict(provider_options or {})
            if threads:
                npu_options.setdefault("npu_threads", str(threads))
            self.session = InferenceSession(model_path, options, providers=[EP_NAME, CPU_EP],
                                            provider_options=[npu_options, {}])
        else:  # still litenpu's session class: its run() checks the feeds alike
            self.session = InferenceSession(model_path, options, providers=[CPU_EP])
        self.dtypes = {i.name: np.dtype(ORT_TYPE_TO_NUMPY.get(i.type, np.float32))
                       for i in self.session.get_inputs()}
        self.output_names = [o.name for o in self.session.get_outputs()]

    def info(self) -> dict[str, Any]:
        """The answer to GET: model, replica, providers and, for the NPU, how its session got
        its Programs: `cache.warm` when every NPU partition came from the compile cache (a
        stored entry or the stored EPContext model), none compiled."""
        info: dict[str, Any] = {"model": self.model, "replica": self.replica_id,
                                "providers": self.session.get_providers()}
        if self.npu:
            stats = self.session.cache_stats()
            statuses = [p.status for p in stats.partitions]
            info["cache"] = {"warm": bool(statuses) and set(statuses) <= WARM, "path": stats.path,
                             "reason": stats.reason, "partitions": statuses}
        return info

    def infer(self, body: bytes) -> tuple[int, bytes]:
        """(HTTP status, body) for a POST body: 200 with the outputs, 400 naming what in the
        request does not fit the model."""
        try:
            feeds, form = decode_request(body, self.dtypes)
            outputs = self.session.run(None, feeds)
        except (RequestError, BindingError) as e:
            return 400, encode_error(str(e))
        return 200, encode_response(dict(zip(self.output_names, outputs, strict=True)),
                                    self.replica_id, form)
