"""hkjit ops inside jax.jit: an XLA FFI custom call launching the kernel on XLA's stream.

    @jax.jit
    def f(x, w):
        return hkjit.silu_and_mul(hkjit.rms_norm(x, w))      # x, w: tracers here

When jax traces the call, the launch path's symbolic route (hkjit/frameworks/__init__.py) lands
here with tracers. From their abstract shapes and dtypes (JAX arrays are dense, row-major) the op
is bound and its kernel compiled and loaded, as a first eager call would (`launch._launcher`, so a
later eager call of the same signature reuses it). The argument struct is filled with made-up,
256-byte aligned pointers and `native.measure` finds where each buffer's pointer lies in it; the
custom call carries the struct, those places and the launch geometry as attributes, and the C
handler (xla_ffi.c, built by hostcc against jax.ffi.include_dir()) writes XLA's buffers into a copy
and calls cuLaunchKernel on XLA's stream: no synchronisation, outputs allocated by XLA, a workspace
as one more (scratch) result zeroed where the kernel needs it, and scratch as one more after it
(XLA allocates both per call, stream-ordered, so nothing is held between calls). An array the op
updates besides its outputs (`Op.updated_names`: attention_bwd_dkdv's dq) is a result aliased to
its operand (input_output_aliases), returned as the new value.

Limits: NVIDIA GPUs (the handler is registered for CUDA); out= cannot be given (JAX arrays are
immutable); run-time scalars (eps, alpha, scale) must be Python numbers (they are baked into the
launch at trace time); no vmap rule; the kernel is loaded on JAX's default GPU (or `device=`).
"""

from __future__ import annotations

import ctypes
import sys
import threading
from pathlib import Path

import numpy as np

from .. import hostcc, interop, launch, native, runtime
from ..dtypes import dtype as to_dtype
from ..errors import DeviceError, InvalidArgumentError
from ..interop import Array

TARGET = "hkjit_launch"
SOURCE = Path(__file__).with_name("xla_ffi.c")
_FAKE_BASE = 1 << 32                      # made-up, 256-byte aligned device addresses
_lock = threading.Lock()
_handler = None                           # the loaded library once registered with XLA


def call(op, values, scalars=(), options=(), device=None, compiler=None, tiles=None):
    """`op` on JAX tracers (inside jax.jit): its outputs as XLA values, from one FFI custom call."""
    jax = sys.modules["jax"]
    names = op.array_names
    for name, v in zip(names, values):
        if v is not None and name in op.output_names:
            raise InvalidArgumentError(f"{op.name}: {name}= cannot be given inside jax.jit (JAX arrays are "
                                       "immutable); leave it out to get a new array")
    from . import jax_tracer_type
    for name, s in zip(op.scalar_names, scalars):
        if isinstance(s, jax_tracer_type()):
            raise InvalidArgumentError(f"{op.name}: {name} is a traced JAX value; inside jax.jit hkjit takes "
                                       "run-time scalars as Python numbers (they are part of the launch)")
    dev = _device(jax, device)
    described = tuple(None if v is None else _describe(v, i, dev) for i, v in enumerate(values))
    launcher = launch._launcher(op, described, dict(options), dev, compiler, dict(tiles or {}))
    binding, plan = launcher.binding, launcher.plan
    if binding.aligned_copies:
        raise InvalidArgumentError(f"{op.name}: these arrays need aligned copies, which jax.jit calls do not make")
    launch._check_scalars(op, scalars)

    # Buffers: operands (the arrays given, in order), then outputs, then the arrays the op updates
    # (each a result aliased to its operand: XLA hands the kernel one buffer holding the operand's
    # value, copying it first where the operand is still read elsewhere, and the new value is a
    # result, never a write XLA does not know of), then the workspace and the scratch.
    operands = [i for i, v in enumerate(values) if v is not None]
    outputs = list(binding.outputs)
    updated = [n for n in op.updated_names if values[names.index(n)] is not None]
    buffer_of = {i: k for k, i in enumerate(operands)}
    buffer_of.update({names.index(n): len(operands) + k for k, n in enumerate(outputs + updated)})
    aliases = {operands.index(names.index(n)): len(outputs) + k for k, n in enumerate(updated)}
    ws_slot, scratch_slot = len(names), len(names) + 1
    extra = [(slot, n) for slot, n in ((ws_slot, plan.workspace_bytes), (scratch_slot, plan.scratch_bytes)) if n]
    n_buffers = len(operands) + len(outputs) + len(updated)       # an updated array is two: operand, result
    for slot, _ in extra:
        buffer_of[slot] = n_buffers
        n_buffers += 1
    ptrs = tuple(_FAKE_BASE * (i + 1) if i in buffer_of else 0 for i in range(len(names) + 2))

    def fill(ptrs, scalars) -> bytes:
        named = dict(zip(names, ptrs[:-2]), workspace=ptrs[-2], scratch=ptrs[-1])
        return bytes(plan.fill(**binding.args(named, scalars)))
    from ..runtime import cuda
    block, patches, mask = native.measure(fill, ptrs, tuple(scalars), plan.args_type, cuda.replace_tensor_map_address)
    missing = [(names + ("workspace", "scratch"))[i] for i in buffer_of if not mask >> i & 1]
    if missing:
        raise InvalidArgumentError(f"{op.name}: the kernel's argument block does not hold {', '.join(missing)} "
                                   "where a pointer can be written at run time, so it cannot run inside jax.jit")
    flat = [v for kind, slot, offset, addend in patches for v in (kind, buffer_of[slot], offset, addend)]
    geometry = [launcher.kernel.function, dev.context, *plan.grid, *launcher.block, plan.dynamic_smem,
                buffer_of.get(ws_slot, 2 ** 64 - 1), plan.workspace_zeroed if plan.workspace_bytes else 0, n_buffers]

    _register(jax)
    result_types = [jax.ShapeDtypeStruct(shape, interop.numpy_dtype(dt)) for shape, dt in binding.outputs.values()]
    result_types += [jax.ShapeDtypeStruct(values[names.index(n)].shape, values[names.index(n)].dtype)
                     for n in updated]
    result_types += [jax.ShapeDtypeStruct((n,), np.uint8) for _, n in extra]
    # Signed views of the same bits: MLIR's dense array attributes have no unsigned element types.
    results = jax.ffi.ffi_call(TARGET, result_types, input_output_aliases=aliases or None)(
        *(values[i] for i in operands), launch=np.array(geometry, np.uint64).view(np.int64),
        block=np.frombuffer(block, np.uint8).view(np.int8), patches=np.array(flat, np.uint64).view(np.int64))
    produced = dict(zip(outputs + updated, results))
    out = tuple(produced.get(n) for n in binding.returns)     # None: an updated array not passed
    return out[0] if len(out) == 1 else out


def _describe(v, slot, dev) -> Array:
    shape = tuple(int(n) for n in v.shape)
    return Array(_FAKE_BASE * (slot + 1), shape, interop.contiguous_strides(shape), to_dtype(np.dtype(v.dtype).name),
                 dev.kind, dev.index, "jax", None)


def _device(jax, device):
    if device is not None:
        dev = runtime.from_string(device)
    else:
        first = jax.devices()[0]
        if first.platform != "gpu":
            raise DeviceError(f"hkjit ops inside jax.jit run on NVIDIA GPUs; JAX's default backend is "
                              f"{first.platform} (pass device='cuda:N' or run JAX on its CUDA backend)")
        index = first.local_hardware_id if first.local_hardware_id is not None else first.id
        dev = runtime.get("cuda", index)
    if dev.kind != "cuda":
        raise DeviceError(f"hkjit ops inside jax.jit run on NVIDIA GPUs, not {dev!r}")
    return dev


def _register(jax) -> None:
    """Build (hostcc), load and register the handler with XLA, once per process."""
    global _handler
    if _handler is not None:
        return
    with _lock:
        if _handler is not None:
            return
        include = Path(jax.ffi.include_dir())
        try:
            path = hostcc.build("xla_ffi", [SOURCE], include_dirs=[include],
                                depends=[include / "xla" / "ffi" / "api" / "c_api.h"])
            lib = ctypes.CDLL(str(path))
        except (hostcc.NativeBuildError, OSError) as e:
            raise hostcc.NativeBuildError(f"hkjit ops inside jax.jit launch through a small C handler built on "
                                          f"first use, which failed here: {e}") from None
        from ..runtime import cuda
        a = cuda.function_addresses()
        lib.hkjit_xla_init.argtypes = [ctypes.c_void_p] * 6
        lib.hkjit_xla_init.restype = ctypes.c_int
        if lib.hkjit_xla_init(a.get("cuLaunchKernel"), a.get("cuCtxGetCurrent"), a.get("cuCtxSetCurrent"),
                              a.get("cuTensorMapReplaceAddress"), a.get("cuMemsetD8Async"), a.get("cuGetErrorName")):
            raise DeviceError("hkjit: this NVIDIA driver lacks a function the XLA FFI handler needs")
        jax.ffi.register_ffi_target(TARGET, jax.ffi.pycapsule(lib.hkjit_xla_launch), platform="CUDA")
        _handler = lib
