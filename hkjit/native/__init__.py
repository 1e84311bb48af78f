"""hkjit's native repeat-call path: `hkjit.launch.call` in C for calls like an earlier one.

    ext = native.extension()                 # fastpath.c, built on first use (hostcc), or None
    table = native.table(ext, torch, slow_call, driver)   # a FastPath: its .call is launch.call
    native.remember(table, op, values, ...)  # launch.py, on the second call of a signature

The extension (`fastpath.c`) keys a call on exactly what the Python repeat path keys on (op,
options, and each tensor's dtype, shape, strides, pointer & 15 and device, read through DLPack's C
exchange table), keeps one argument block per key, writes new pointers into it where `measure`
found them, and launches through libcuda. Python stays the path for first calls, for everything the
extension does not match, and for machines where it cannot be built or loaded (no C compiler, no
Python headers, torch older than 2.11, HKJIT_NATIVE=0): every call gives the same result either way.

Where pointers live in a block is measured, not declared: the op's own fill runs again with each
pointer moved (`measure`), and the bytes that change must be a 64-bit field holding pointer +
constant, or a CUDA tensor map that cuTensorMapReplaceAddress turns into exactly the moved fill.
A pointer found nowhere, and every new run-time scalar, gets a fresh block from the op's fill
(`repack`), which also raises the Python path's errors.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

from ..errors import DeviceError, LaunchError

SOURCE = Path(__file__).with_name("fastpath.c")
PTR, TMAP = 0, 1                              # patch kinds (fastpath.c: P_PTR, P_TMAP)
# Probe offsets: whole multiples of 16 (the alignment class is part of the key) that move bits 4-35,
# so a fill that read more of a pointer than its alignment class would be caught by the comparison.
DELTAS = (0x1_0000_1230, 0x2_0004_5670)
MAX_ARGS_BYTES = 4096

_ext = None          # the loaded extension; False once it could not be
why_not = ""         # why the native path is off, for `hkjit info` and tests


def wanted() -> bool:
    """False when HKJIT_NATIVE is 0 / off / false / no."""
    return os.environ.get("HKJIT_NATIVE", "1").strip().lower() not in ("0", "off", "false", "no")


def extension():
    """The compiled extension module, or None (then `why_not` says why)."""
    global _ext, why_not
    if _ext is None:
        if not wanted():
            why_not = "HKJIT_NATIVE=0"
            return None
        from .. import hostcc           # here: a first call (the warm start) never needs the compiler
        try:
            path = hostcc.build("fastpath", [SOURCE], python_extension=True)
            spec = importlib.util.spec_from_file_location("hkjit.native._fastpath", path)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
        except (hostcc.NativeBuildError, ImportError, OSError) as e:
            _ext, why_not = False, f"{type(e).__name__}: {e}"
            return None
        _ext = module
    return _ext or None


def table(ext, torch, slow_call, driver):
    """A FastPath over torch's tensor types (torch.Tensor, torch.nn.Parameter) and exchange table,
    falling back to `slow_call` (hkjit.launch.call's Python half), launching through `driver`
    (`driver_functions(hkjit.runtime.cuda.function_addresses())`; None: launches are only
    recorded, for tests without a GPU). None, with `why_not`, where torch has no exchange table."""
    global why_not
    capsule = getattr(torch.Tensor, "__dlpack_c_exchange_api__", None)
    if capsule is None:
        why_not = f"torch {torch.__version__} has no DLPack C exchange table (__dlpack_c_exchange_api__, torch 2.11+)"
        return None
    try:
        return ext.FastPath((torch.Tensor, torch.nn.Parameter), capsule, slow_call, LaunchError, DeviceError,
                            torch.empty, driver)
    except (ValueError, TypeError) as e:
        why_not = str(e)
        return None


def driver_functions(addresses: dict):
    """The six addresses fastpath.c takes, in its order, from runtime.cuda.function_addresses()."""
    return tuple(addresses.get(n) for n in ("cuLaunchKernel", "cuCtxGetCurrent", "cuCtxSetCurrent",
                                            "cuGetErrorName", "cuGetErrorString", "cuTensorMapReplaceAddress"))


# --- where a block holds each pointer ----------------------------------------------------------
def _layout(struct_type, base=0, out=None):
    """(offsets of 8-byte integer fields, offsets of 128-byte tensor-map fields) of a ctypes
    structure, nested structures and arrays included."""
    import ctypes
    if out is None:
        out = ([], [])
    for field in struct_type._fields_:
        name, ctype = field[0], field[1]
        offset = base + getattr(struct_type, name).offset
        _layout_type(ctype, offset, out, ctypes)
    return out


def _layout_type(ctype, offset, out, ctypes):
    if isinstance(ctype, type) and issubclass(ctype, ctypes.Structure):
        if ctypes.sizeof(ctype) == 128 and offset % 64 == 0:
            out[1].append(offset)                        # a CUtensorMap's place (alignas(64), 128 B)
        else:
            _layout(ctype, offset, out)
    elif isinstance(ctype, type) and issubclass(ctype, ctypes.Array):
        size = ctypes.sizeof(ctype._type_)
        for k in range(ctype._length_):
            _layout_type(ctype._type_, offset + k * size, out, ctypes)
    elif ctypes.sizeof(ctype) == 8 and getattr(ctype, "_type_", None) in ("q", "Q", "l", "L", "P"):
        out[0].append(offset)


def measure(fill, ptrs: tuple, scalars: tuple, struct_type, replace_tensor_map=None):
    """(block, patches, mask of pointers written in place) for `fill(ptrs, scalars) -> bytes`.
    `replace_tensor_map(buf, offset, ptr)` applies cuTensorMapReplaceAddress (None: tensor maps
    are not patched, their pointers are repacked)."""
    block = fill(ptrs, scalars)
    words, maps = _layout(struct_type)
    patches, mask = [], 0
    for i, p in enumerate(ptrs):
        if not p:
            continue                                     # an absent array: None in the key, never moves
        found = _pointer_patches(fill, block, ptrs, scalars, i, words, maps, replace_tensor_map)
        if found is not None:
            patches += found
            mask |= 1 << i
    return block, tuple(patches), mask


def _pointer_patches(fill, block, ptrs, scalars, i, words, maps, replace):
    probes = []
    for d in DELTAS:
        q = ptrs[i] + d
        if q >= 1 << 64:
            return None
        moved = list(ptrs)
        moved[i] = q
        try:
            out = fill(tuple(moved), scalars)
        except Exception:            # noqa: BLE001  (a fill that refuses the probe: repack instead)
            return None
        if len(out) != len(block):
            return None
        probes.append((q, out))
    changed = {k for _, out in probes for k, (x, y) in enumerate(zip(block, out)) if x != y}
    patches, covered = [], set()
    for off in maps:
        if any(off <= k < off + 128 for k in changed):
            if replace is None:
                return None
            patches.append((TMAP, i, off, 0))
            covered.update(range(off, off + 128))
    for off in words:
        if off in covered or not any(off <= k < off + 8 for k in changed):
            continue
        addend = (int.from_bytes(block[off:off + 8], "little") - ptrs[i]) % (1 << 64)
        if any((int.from_bytes(out[off:off + 8], "little") - q) % (1 << 64) != addend for q, out in probes):
            return None
        patches.append((PTR, i, off, addend))
        covered.update(range(off, off + 8))
    if changed - covered:
        return None
    for q, out in probes:                                # the patched block must be the fill, byte for byte
        if apply(block, patches, {i: q}, replace) != out:
            return None
    return patches


def apply(block: bytes, patches, ptrs: dict, replace=None) -> bytes:
    """`block` with `patches` applied for the pointers in `ptrs` (slot -> pointer): what
    fastpath.c writes, in Python (for `measure` and for tests)."""
    buf = bytearray(block)
    for kind, source, off, addend in patches:
        if source not in ptrs:
            continue
        v = (ptrs[source] + addend) % (1 << 64)
        if kind == PTR:
            buf[off:off + 8] = v.to_bytes(8, "little")
        else:
            replace(buf, off, v)
    return bytes(buf)


def remember(table, op, values: tuple, options, scalars: tuple, ptrs: tuple, launcher, what: str, repack,
             made: dict) -> bool:
    """Register the call `values` (None where an output was allocated: `made` maps its slot to the
    tensor allocated this time) whose block holds `ptrs`. False where the call cannot go native."""
    plan, kernel = launcher.plan, launcher.kernel
    if plan.workspace_bytes or plan.scratch_bytes or not isinstance(getattr(kernel, "function", None), int):
        return False                     # per-stream workspaces and per-call scratch stay on the Python path
    device = launcher.device
    recipe = getattr(launcher, "native", None)
    if recipe is None:
        from ..runtime import cuda
        replace = cuda.replace_tensor_map_address if getattr(device, "kind", "") == "cuda" else None
        try:
            block, patches, mask = measure(repack, ptrs, scalars, plan.args_type, replace)
        except Exception:                # noqa: BLE001  (the Python path keeps this signature)
            launcher.native = False
            return False
        recipe = launcher.native = (patches, mask)
    elif recipe is False:
        return False
    else:
        block = repack(ptrs, scalars)
    patches, mask = recipe
    if len(block) > MAX_ARGS_BYTES or any(not (mask >> slot & 1) for slot in made):
        return False                     # a fresh output whose pointer cannot be written: Python
    allocs = []
    for slot, t in made.items():
        ptr, dl_dtype, dl_device = table.describe(t)
        allocs.append((slot, tuple(t.shape), dl_dtype, dl_device, ptr & 15, t.dtype, t.device))
    names = op.array_names
    returns = tuple(names.index(n) for n in launcher.binding.returns)
    try:
        table.register(op, values, options, scalars, ptrs, kernel.function, getattr(device, "context", 0) or 0,
                     tuple(plan.grid), tuple(launcher.block), plan.dynamic_smem, block, patches, mask, repack,
                     tuple(allocs), returns, what)
    except (ValueError, TypeError, OverflowError):
        return False
    return True
