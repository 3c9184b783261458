"""The peer column of `litenpu bench`: onnxruntime's OpenVINO execution provider on its CPU
device, what a user would pick instead of litenpu, timed beside onnxruntime CPU.

Two ways to run it, tried in this order; the report says which one ran, or why neither:

* in this process: the plugin EP package `onnxruntime-ep-openvino` (`pip install
  litenpu[peers]`), registered with `onnxruntime.register_execution_provider_library`, when
  it offers an OpenVINO CPU device (it offers devices of Intel hardware only);
* in a subprocess: `onnxruntime-openvino`, a whole onnxruntime build with the OpenVINO EP
  compiled in, which cannot share a venv with the plain `onnxruntime` package. It lives in a
  venv of its own (`make_venv`, i.e. `litenpu bench --make-peer-venv`; default under the
  litenpu cache directory, `LITENPU_PEER_VENV` moves it) where `peer_worker.py` holds the
  session and times blocks of runs when told to, with the same `timed_block` as this process.

Either way the peer is one more `BlockTimer` for `timing.interleaved_blocks`: same feeds,
same blocks, same settle runs and pauses, same median as the other columns.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

import numpy as np
import onnxruntime as ort

from provider.bench.timing import BlockTimer, timed_block
from provider.cache import default_cache_dir
from provider.errors import LitenpuError

NAME = "OpenVINO EP CPU"
EP = "OpenVINOExecutionProvider"
PLUGIN = "onnxruntime-ep-openvino"
FULL_BUILD = "onnxruntime-openvino"
REGISTRATION = "litenpu-bench-openvino"
INTEL = 0x8086
WORKER = Path(__file__).with_name("peer_worker.py")


class PeerError(LitenpuError):
    """The peer could not be set up, or could not open or run a model."""


@dataclass(frozen=True)
class PeerModel:
    """A model opened on the peer: the outputs of one run on the feeds, and its timer."""

    outputs: list[np.ndarray]
    timer: BlockTimer


class PluginPeer:
    """The OpenVINO plugin EP, registered in this process, on its CPU device."""

    def __init__(self, device: ort.OrtEpDevice, version: str) -> None:
        self.device = device
        self.how = (f"{PLUGIN} {version}, OpenVINO device CPU, in this process (plugin "
                    f"library registered with onnxruntime {ort.__version__})")

    def open(self, path: Path, feeds: dict[str, np.ndarray]) -> PeerModel:
        options = ort.SessionOptions()
        options.add_provider_for_devices([self.device], {})
        try:
            session = ort.InferenceSession(str(path), sess_options=options)
            outputs = session.run(None, feeds)
        except Exception as e:  # onnxruntime raises its own types for any failure
            raise PeerError(f"{NAME} on {path.name}: {e}") from e
        return PeerModel(outputs, timed_block(lambda: session.run(None, feeds)))

    def close(self) -> None:
        ort.unregister_execution_provider_library(REGISTRATION)


class VenvPeer:
    """`onnxruntime-openvino` in a venv of its own, driven through `peer_worker.py` (`ep`
    names the provider it must have and run first; the OpenVINO EP, but for tests)."""

    def __init__(self, python: Path, ep: str = EP) -> None:
        self.ep = ep
        self.folder = tempfile.TemporaryDirectory(prefix="litenpu-peer-")  # arrays, both ways
        self.log = tempfile.TemporaryFile(mode="w+", encoding="utf-8")
        try:
            self.process = subprocess.Popen([str(python), str(WORKER)], stdin=subprocess.PIPE,
                                            stdout=subprocess.PIPE, stderr=self.log, text=True)
        except OSError as e:
            self.log.close()
            self.folder.cleanup()
            raise PeerError(f"{python}: cannot start the {NAME} worker: {e}") from e
        try:
            hello = self.call(op="hello")
        except PeerError:
            self.close()
            raise
        if ep not in hello["providers"]:
            self.close()
            raise PeerError(f"{python}: {hello['distribution']} has no {ep} "
                            f"(providers: {', '.join(hello['providers'])})")
        device = ", device CPU" if ep == EP else ""
        self.how = (f"{hello['distribution']} ({ep}{device}) in a subprocess running {python}, "
                    "which times each block of runs itself")

    def call(self, **request: object) -> dict:
        """Send one request to the worker; its answer (PeerError if it failed or died)."""
        try:
            self.process.stdin.write(json.dumps(request) + "\n")
            self.process.stdin.flush()
            line = self.process.stdout.readline()
        except (BrokenPipeError, OSError):
            line = ""
        if not line:
            self.log.seek(0)
            tail = self.log.read()[-2000:].strip()
            raise PeerError(f"the {NAME} worker exited (code {self.process.poll()})"
                            + (f": {tail}" if tail else ""))
        answer = json.loads(line)
        if "error" in answer:
            raise PeerError(f"{NAME}: {answer['error']}")
        return answer

    def open(self, path: Path, feeds: dict[str, np.ndarray]) -> PeerModel:
        sent, received = Path(self.folder.name, "feeds.npz"), Path(self.folder.name, "outputs.npz")
        np.savez(sent, **feeds)
        answer = self.call(op="open", model=str(path.resolve()), provider=self.ep,
                           options={"device_type": "CPU"} if self.ep == EP else {},
                           feeds=str(sent), outputs=str(received))
        if answer["providers"][0] != self.ep:
            raise PeerError(f"{NAME} on {path.name}: the session runs on "
                            f"{answer['providers']}, not {self.ep}")
        with np.load(received, allow_pickle=False) as saved:
            outputs = [saved[f"arr_{i}"] for i in range(len(saved.files))]
        return PeerModel(outputs, lambda settle, size: self.call(op="block", settle=settle,
                                                                 size=size)["ms"])

    def close(self) -> None:
        running = self.process.poll() is None
        try:  # closed even when the worker died: else a request it never read is flushed
            self.process.stdin.close()  # into the dead pipe at garbage collection
        except OSError:
            pass
        if running:
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process.stdout.close()
        self.log.close()
        self.folder.cleanup()


Peer = PluginPeer | VenvPeer


def default_venv() -> Path:
    """Where the subprocess peer's venv is: $LITENPU_PEER_VENV, else under the cache dir."""
    explicit = os.environ.get("LITENPU_PEER_VENV")
    return Path(explicit) if explicit else default_cache_dir() / "peers" / "openvino"


def venv_python(venv: Path) -> Path:
    return venv / ("Scripts/python.exe" if sys.platform == "win32" else "bin/python")


def make_venv(venv: Path, progress: Callable[[str], None] | None = None) -> Path:
    """Create the subprocess peer's venv (needs PyPI); its Python. An existing one is kept;
    a failed creation leaves no venv behind."""
    python = venv_python(venv)
    if python.exists():
        return python
    if progress:
        progress(f"creating the {NAME} venv in {venv} ({FULL_BUILD} from PyPI)")
    try:
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True,
                       capture_output=True, text=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", FULL_BUILD, "numpy"],
                       check=True, capture_output=True, text=True)
    except subprocess.CalledProcessError as e:
        shutil.rmtree(venv, ignore_errors=True)
        raise PeerError(f"creating the {NAME} venv in {venv} failed: "
                        f"{(e.stderr or e.stdout or '').strip()[-1000:]}") from e
    return python


def _plugin() -> tuple[PluginPeer | None, str]:
    """The in-process plugin peer, or why there is none."""
    try:
        import onnxruntime_ep_openvino as plugin
    except ImportError:
        return None, f"{PLUGIN} is not installed (pip install litenpu[peers])"
    version = metadata.version(PLUGIN)
    try:
        ort.register_execution_provider_library(REGISTRATION, plugin.get_library_path())
    except Exception as e:  # onnxruntime raises its own types for any failure
        return None, f"{PLUGIN} {version} did not register: {e}"
    devices = ort.get_ep_devices()
    ours = [d for d in devices if d.ep_name == plugin.get_ep_name()
            and d.ep_metadata.get("ov_device") == "CPU"]
    if ours:
        return PluginPeer(ours[0], version), ""
    ort.unregister_execution_provider_library(REGISTRATION)
    cpu = next((d.device for d in devices if d.device.type == ort.OrtHardwareDeviceType.CPU),
               None)
    why = ""
    if cpu is not None and cpu.vendor_id != INTEL:
        why = (f" (it offers Intel hardware only; this CPU's vendor is {cpu.vendor or '?'}, "
               f"id {cpu.vendor_id:#06x})")
    return None, f"{PLUGIN} {version} registered but offers no OpenVINO CPU device{why}"


def _venv(venv: Path) -> tuple[VenvPeer | None, str]:
    """The subprocess peer, or why there is none."""
    python = venv_python(venv)
    if not python.exists():
        return None, (f"no {FULL_BUILD} venv at {venv} (create it with `litenpu bench "
                      "--make-peer-venv`, or set LITENPU_PEER_VENV)")
    try:
        return VenvPeer(python), ""
    except PeerError as e:
        return None, str(e)


def find_peer(venv: Path | None = None) -> tuple[Peer | None, str]:
    """The OpenVINO peer (in-process plugin first, else the subprocess venv) or None, and
    why each way tried before it (or every way, for None) did not work."""
    peer, plugin_reason = _plugin()
    if peer is not None:
        return peer, ""
    peer, venv_reason = _venv(venv or default_venv())
    if peer is not None:
        return peer, f"not in this process: {plugin_reason}"
    return None, f"{plugin_reason}; {venv_reason}"


@contextmanager
def openvino_peer(venv: Path | None = None) -> Iterator[tuple[Peer | None, str]]:
    """`find_peer`, closed (worker ended, plugin unregistered) on leaving the block."""
    peer, reason = find_peer(venv)
    try:
        yield peer, reason
    finally:
        if peer is not None:
            peer.close()
