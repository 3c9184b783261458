"""Build hook: compiles the onnxruntime plugin-EP trampoline (provider/ort/_trampoline.c).

Everything else about the package lives in pyproject.toml. The trampoline is a plain shared
library loaded with ctypes (it has no Python module init), so it is built as an Extension only
to get the compiler, the platform suffix and the install location for free: `pip install .`
puts it next to provider/ort/__init__.py, `pip install -e .` builds it in place.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "provider.ort._trampoline",
            sources=["provider/ort/_trampoline.c"],
            extra_compile_args=["-O2", "-fvisibility=hidden"],
        )
    ]
)
