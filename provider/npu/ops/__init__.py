"""The NPU's ops, one module per family, in one explicit table (`registry`).

Each family module holds everything the NPU knows about its Lite primitives: the static
capability row and the lowering rule (`OPS`, `define`), the numpy kernels (`KERNELS`,
`register`) and the lowerings of those kernels' steps to the C library (`NATIVE`,
`native`). Adding a family is one module here plus one line in the import list below;
importing this package registers every family, explicitly.
"""

from provider.npu.ops import (  # noqa: F401  (imported for their registrations)
    activation,
    conv,
    cumsum,
    elementwise,
    gather_elements,
    layout,
    matmul,
    norm,
    pool,
    quant,
    quant_conv,
    quant_dynamic,
    quant_eltwise,
    reduce,
    resize,
    reverse,
    rnn,
    scatter,
    shape,
    topk,
    triangle,
)
from provider.npu.ops.registry import (
    KERNELS,
    NATIVE,
    OPS,
    Kernel,
    NativeLowering,
    OpDef,
    get,
    lower,
    op_def,
    register,
)

__all__ = ["KERNELS", "NATIVE", "OPS", "Kernel", "NativeLowering", "OpDef", "get", "lower",
           "op_def", "register"]
