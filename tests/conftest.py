"""Test-suite wiring.

tox runs the tests against the *installed* package (so the built trampoline and package
data are what users get), which means the repo root is not on sys.path. The repo's
`models/` (builder scripts, not part of the distribution) is made importable here
without exposing the source tree's `provider`/`converters`.
"""

import importlib.util
import sys
from pathlib import Path

_MODELS = Path(__file__).resolve().parent.parent / "models"

if "models" not in sys.modules:
    _spec = importlib.util.spec_from_file_location(
        "models", _MODELS / "__init__.py", submodule_search_locations=[str(_MODELS)])
    _module = importlib.util.module_from_spec(_spec)
    sys.modules["models"] = _module
    _spec.loader.exec_module(_module)

# Hypothesis: the default run draws the same examples every time (CI must not turn red on a
# case found by chance in one environment); `pytest --hypothesis-profile=explore` draws new
# ones, which is how the slow runs and local bug hunts should use it.
from hypothesis import settings  # noqa: E402

settings.register_profile("deterministic", derandomize=True, database=None)
settings.register_profile("explore")
settings.load_profile("deterministic")
