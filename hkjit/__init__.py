"""hkjit: a JIT kernel compiler with an on-disk cache for HipKittens-style tile kernels.

    import hkjit
    c = hkjit.gemm(a, b)                      # torch / CuPy / JAX / NumPy arrays
    built = hkjit.build("gemm", target="gfx950", m=4096, n=4096, k=4096)
"""

from ._version import __version__

from .errors import (BundleError, CacheError, CompileError, CompilerNotFoundError, DeviceError,  # noqa: E402
                     DTypeError, HKJitError, InvalidArgumentError, LaunchError, OfflineMissError,
                     TargetError, UnsupportedArrayError)
from .api import Built, build, inspect, reset_state, set_offline  # noqa: E402
from .ops.gemm import gemm  # noqa: E402
from .ops.rms_norm import rms_norm  # noqa: E402

__all__ = ["gemm", "rms_norm", "build", "Built", "inspect", "set_offline", "reset_state", "HKJitError", "InvalidArgumentError", "DTypeError",
           "UnsupportedArrayError", "DeviceError", "TargetError", "CompilerNotFoundError", "CompileError",
           "CacheError", "OfflineMissError", "BundleError", "LaunchError", "__version__"]
