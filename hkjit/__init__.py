"""hkjit: a JIT kernel compiler with an on-disk cache for HipKittens-style tile kernels.

    import hkjit
    c = hkjit.gemm(a, b)                      # torch / CuPy / JAX / NumPy arrays
    built = hkjit.build("gemm", target="gfx950", m=4096, n=4096, k=4096)

`import hkjit` loads only the error types: an op, the API and every submodule are imported on
first use (PEP 562), so a program pays for what it calls.
"""

import importlib

from ._version import __version__
from .errors import (BundleError, CacheError, CompileError, CompilerNotFoundError, DeviceError,
                     DTypeError, HKJitError, InvalidArgumentError, LaunchError, OfflineMissError,
                     TargetError, UnsupportedArrayError)

# Public name -> the module that defines it (imported on first use).
_EXPORTS = {
    "build": "api", "Built": "api", "inspect": "api", "reset_state": "api", "set_offline": "api",
    "gemm": "ops.gemm",
    "rms_norm": "ops.rms_norm",
    "attention": "ops.attention",
    "attention_backward": "ops.attention_backward",
    "add_rms_norm": "ops.norms", "layer_norm": "ops.norms", "dropout_add_layer_norm": "ops.norms",
    "rope": "ops.rope", "rope_qk": "ops.rope",
    "silu": "ops.activations", "gelu": "ops.activations", "gelu_tanh": "ops.activations",
    "relu": "ops.activations", "tanh": "ops.activations",
    "silu_and_mul": "ops.activations", "gelu_and_mul": "ops.activations",
    "softmax": "ops.softmax",
    "topk": "ops.topk",
    "causal_conv1d": "ops.causal_conv1d", "causal_conv1d_update": "ops.causal_conv1d",
}

__all__ = sorted(_EXPORTS) + ["HKJitError", "InvalidArgumentError", "DTypeError", "UnsupportedArrayError",
                              "DeviceError", "TargetError", "CompilerNotFoundError", "CompileError", "CacheError",
                              "OfflineMissError", "BundleError", "LaunchError", "__version__"]


def __getattr__(name):
    module = _EXPORTS.get(name)
    if module and module.startswith("ops."):
        # torch.compile, meta tensors and jax.jit reach the ops through hkjit/frameworks (no framework
        # is imported here: see its docstring).
        importlib.import_module(f"{__name__}.frameworks").install()
    try:
        value = (getattr(importlib.import_module(f"{__name__}.{module}"), name) if module
                 else importlib.import_module(f"{__name__}.{name}"))      # a submodule: hkjit.api, ...
    except ModuleNotFoundError as e:
        if e.name != f"{__name__}.{name}":
            raise
        raise AttributeError(f"module 'hkjit' has no attribute {name!r}") from None
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_EXPORTS))
