"""numpy kernels of the reference NPU, one module per op family, in one explicit table.

`KERNELS` maps a registry key to a `Kernel` (see registry.py for the calling contract);
`get(name)` looks one up with an error that lists what exists. Importing this package
registers every family below, explicitly.
"""

from provider.npu.kernels import (  # noqa: F401  (imported for their registrations)
    activation,
    conv,
    elementwise,
    layout,
    matmul,
    norm,
    pool,
    reduce,
)
from provider.npu.kernels.registry import KERNELS, Kernel, get, register

__all__ = ["KERNELS", "Kernel", "get", "register"]
