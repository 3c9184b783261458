"""Plain onnxruntime code finds the NPU EP as onnxruntime-ep-* packages are found: by library
path, device and policy, with no provider.register() (each case in a fresh subprocess)."""

import ctypes as C
import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
from children import PACKAGE_ROOT, child_env
from ort_models import STATIC

import provider
from provider.ort import EP_NAME, VENDOR_ID, abi


def _run(script: str, *args: str) -> subprocess.CompletedProcess:
    """`script` in a fresh interpreter (nothing of litenpu imported yet)."""
    return subprocess.run([sys.executable, "-c", textwrap.dedent(script), *args],
                          capture_output=True, text=True, timeout=300, env=child_env(),
                          cwd=PACKAGE_ROOT)


def _json(result: subprocess.CompletedProcess) -> dict:
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_package_convention_names():
    assert provider.get_ep_name() == EP_NAME
    assert provider.get_ep_names() == [EP_NAME]
    assert Path(provider.get_library_path()).is_file()


PLAIN = """
    import json, sys
    import numpy as np
    import onnxruntime as ort
    from provider import get_ep_name, get_library_path

    before = "provider.ort.factory" in sys.modules
    ort.register_execution_provider_library("litenpu", get_library_path())
    (device,) = [d for d in ort.get_ep_devices() if d.ep_name == get_ep_name()]
    options = ort.SessionOptions()
    options.add_session_config_entry("session.disable_cpu_ep_fallback", "1")  # all on the NPU
    options.add_provider_for_devices([device], {})
    session = ort.InferenceSession(sys.argv[1], options)
    vendor = device.memory_info(ort.OrtDeviceMemoryType.DEFAULT).device_vendor_id
    x = np.random.default_rng(5).standard_normal((2, 8)).astype(np.float32)
    binding = session.io_binding()
    binding.bind_cpu_input("x", x)
    y = ort.OrtValue.ortvalue_from_shape_and_type([2, 8], np.float32, "npu", 0, vendor)
    binding.bind_ortvalue_output("y", y)
    session.run_with_iobinding(binding)
    # the NPU output feeds the next run in place
    again = session.io_binding()
    again.bind_ortvalue_input("x", y)
    z = ort.OrtValue.ortvalue_from_shape_and_type([2, 8], np.float32, "npu", 0, vendor)
    again.bind_ortvalue_output("y", z)
    session.run_with_iobinding(again)
    cpu = ort.InferenceSession(sys.argv[1], providers=["CPUExecutionProvider"])
    expected = cpu.run(None, {"x": cpu.run(None, {"x": x})[0]})[0]
    print(json.dumps({
        "factory_before": before, "factory_after": "provider.ort.factory" in sys.modules,
        "registered_by_provider": sys.modules["provider.ort.registration"]._REGISTERED
        if "provider.ort.registration" in sys.modules else False,
        "device_type": int(device.device.type.value), "metadata": dict(device.device.metadata),
        "output_device": z.device_name().lower(),
        "error": float(np.abs(z.numpy() - expected).max())}))
"""


def test_plain_onnxruntime_runs_the_npu_with_iobinding(tmp_path):
    model = tmp_path / "static.onnx"
    model.write_bytes(STATIC)
    out = _json(_run(PLAIN, str(model)))
    # onnxruntime loaded the library, and the library installed its Python side itself
    assert out["factory_before"] is False and out["factory_after"] is True
    assert out["registered_by_provider"] is False
    assert out["output_device"] == "npu" and out["error"] == 0.0
    if abi.runtime_api_version(ort.__version__) >= abi.EP_API["CreateHardwareDevice"].since:
        assert out["device_type"] == int(ort.OrtHardwareDeviceType.NPU.value)
        assert out["metadata"] == {"is_virtual": "1", "device": "sim"}
    else:  # onnxruntime 1.23 lets no plugin create a device: the NPU sits on the CPU
        assert out["device_type"] == int(ort.OrtHardwareDeviceType.CPU.value)


def test_prefer_npu_policy_selects_the_npu():
    provider.register()
    options = ort.SessionOptions()
    options.set_provider_selection_policy(ort.OrtExecutionProviderDevicePolicy.PREFER_NPU)
    session = ort.InferenceSession(STATIC, options)
    assert session.get_providers()[0] == EP_NAME
    x = np.ones((2, 8), np.float32)
    np.testing.assert_array_equal(session.run(None, {"x": x})[0], np.full((2, 8), 2.0))


def test_npu_device_type_filter_finds_it():
    provider.register()
    npus = [d for d in ort.get_ep_devices() if d.device.type == ort.OrtHardwareDeviceType.NPU]
    if abi.runtime_api_version(ort.__version__) < abi.EP_API["CreateHardwareDevice"].since:
        pytest.skip(f"onnxruntime {ort.__version__} lets no plugin EP create an NPU device")
    assert npus and {d.ep_name for d in npus} == {EP_NAME}
    assert {d.device.vendor_id for d in npus} == {VENDOR_ID}


def test_provider_register_after_a_plain_registration(tmp_path):
    out = _json(_run("""
        import json, onnxruntime as ort, provider
        ort.register_execution_provider_library("mine", provider.get_library_path())
        provider.register()
        session = provider.InferenceSession(__import__("sys").argv[1],
                                            providers=["NPUExecutionProvider"])
        print(json.dumps({"devices": len(provider.ep_devices()),
                          "npu": [p.device for p in session.partition()]}))
    """, str(_static_file(tmp_path))))
    assert out == {"devices": 2, "npu": ["NPU", "NPU"]}  # one per registration: both work


def test_register_lists_one_device_and_unregister_removes_it():
    out = _json(_run("""
        import json, provider
        provider.register()
        provider.register()
        counts = [len(provider.ep_devices())]
        provider.unregister()
        counts.append(len(provider.ep_devices()))
        provider.register()
        print(json.dumps(counts + [len(provider.ep_devices())]))
    """))
    assert out == [1, 0, 1]


def test_a_failed_python_import_is_a_clear_status():
    result = _run("""
        import sys, onnxruntime as ort, provider
        path = provider.get_library_path()
        sys.modules["provider.ort.discovery"] = None  # the library's import of it fails
        ort.register_execution_provider_library("litenpu", path)
    """)
    assert result.returncode != 0
    assert ("litenpu: no NPU execution provider: installing its Python side "
            "(provider.ort.discovery) failed: import of provider.ort.discovery halted") \
        in result.stderr


# A C program with no Python in it: onnxruntime's own library registers ours. OrtApi slots
# (member order in onnxruntime_c_api.h): 2 GetErrorMessage, 3 CreateEnv,
# 301 RegisterExecutionProviderLibrary.
NO_PYTHON = r"""
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
typedef struct { const void *(*GetApi)(uint32_t); const char *(*GetVersionString)(void); } Base;
typedef void *(*create_env)(int, const char *, void **);
typedef void *(*register_lib)(void *, const char *, const char *);
typedef const char *(*error_message)(const void *);
int main(int argc, char **argv) {
  void *lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (lib == NULL) { printf("dlopen: %s\n", dlerror()); return 2; }
  const Base *(*get_base)(void) = (const Base *(*)(void))dlsym(lib, "OrtGetApiBase");
  void *const *api = (void *const *)get_base()->GetApi(23);
  void *env = NULL;
  void *status = ((create_env)api[3])(3, "no-python", &env);
  if (status != NULL) { printf("CreateEnv: %s\n", ((error_message)api[2])(status)); return 2; }
  status = ((register_lib)api[301])(env, "litenpu", argv[2]);
  printf("%s\n", status != NULL ? ((error_message)api[2])(status) : "registered");
  return status != NULL;
}
"""


def test_outside_python_the_library_fails_with_a_clear_status(tmp_path):
    compiler = shutil.which("cc") or shutil.which("gcc")
    capi = Path(ort.__file__).parent / "capi"
    runtime = sorted(capi.glob("libonnxruntime.so*"))
    if compiler is None or not runtime:
        pytest.skip("needs a C compiler and onnxruntime's shared library in onnxruntime/capi")
    (tmp_path / "no_python.c").write_text(NO_PYTHON)
    program = tmp_path / "no_python"
    subprocess.run([compiler, "-o", str(program), str(tmp_path / "no_python.c"), "-ldl"],
                   check=True, capture_output=True)
    result = subprocess.run([str(program), str(runtime[0]), provider.get_library_path()],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 1, result.stdout + result.stderr
    assert result.stdout.strip() == (
        "litenpu: no NPU execution provider: this process runs no Python interpreter; the EP "
        "is written in Python: load the library from a Python process that can import litenpu")


def test_the_library_never_links_python():
    library = C.CDLL(provider.get_library_path())
    assert library.litenpu_has_entry_points() in (0, 1)
    ldd = shutil.which("ldd")
    if ldd is None:
        pytest.skip("no ldd to list the library's dependencies")
    deps = subprocess.run([ldd, provider.get_library_path()], capture_output=True, text=True)
    assert "libpython" not in deps.stdout


def _static_file(tmp_path: Path) -> Path:
    path = tmp_path / "static.onnx"
    path.write_bytes(STATIC)
    return path
