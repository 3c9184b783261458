"""Import first in a benchmark script: the BLAS environment numpy's OpenBLAS reads as it loads.

This machine exports OPENBLAS_CORETYPE (and may export OPENBLAS_L2_SIZE) for some other
library's sake; numpy's OpenBLAS would obey it and run the numpy kernels' GEMMs on slower
kernels than the CPU has. The NPU's own OpenBLAS ignores it anyway (provider/npu/native.py).
One BLAS thread: the NPU's cores split the GEMMs instead.
"""

import os

DROPPED_ENV = {k: os.environ.pop(k) for k in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")
               if k in os.environ}
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
