"""Build hook: compiles the two plain C libraries of the package, loaded with ctypes.

- provider/ort/_trampoline.c + provider/ort/csrc/*.c: the onnxruntime plugin-EP library (the
  trampoline to the Python EP, which finds the running Python's C API with dlsym and is never
  linked against libpython, and the data plane's side of it: Compute, the allocator, the
  data transfer), built as provider/ort/_trampoline;
- provider/npu/csrc/*.c: the reference NPU's compiled kernels, its thread pool and its data
  plane (device heap, arena sets, run plans), built as provider/npu/_native.

Everything else about the package lives in pyproject.toml. Neither library has a Python
module init; each is built as an Extension only to get the compiler, the platform suffix and
the install location for free: `pip install .` puts it next to its package's __init__.py,
`pip install -e .` builds it in place.
"""

import glob

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "provider.ort._trampoline",
            sources=["provider/ort/_trampoline.c", *sorted(glob.glob("provider/ort/csrc/*.c"))],
            depends=["provider/ort/csrc/ep.h", "provider/npu/csrc/plane.h",
                     "provider/npu/csrc/npu.h"],
            extra_compile_args=["-O2", "-fvisibility=hidden", "-std=gnu11"],
            libraries=["dl"],  # dlsym/dladdr (part of libc from glibc 2.34)
        ),
        Extension(
            "provider.npu._native",
            sources=sorted(glob.glob("provider/npu/csrc/*.c")),
            depends=sorted(glob.glob("provider/npu/csrc/*.h")),
            # -fno-trapping-math / -fno-math-errno: no value changes (NaNs and infinities
            # as before; FP exceptions stay masked, errno is never read), but GCC then
            # vectorizes the loops over exp, erf, tanh, rint and sqrt (GELU: 9x faster)
            extra_compile_args=["-O3", "-fvisibility=hidden", "-std=c11", "-ffp-contract=fast",
                                "-fno-trapping-math", "-fno-math-errno"],
            libraries=["m"],
        ),
    ]
)
