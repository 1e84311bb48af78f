"""The HIP runtime behind the stand-in libamdhip64.so, served by hkjit's CDNA simulator.

Each device is a `hkjit.sim.backend.SimDevice`: allocations are simulator buffers and a device
pointer is the simulator's address of one (devices get disjoint address ranges, as with HIP's
unified addressing, so a pointer says which device holds it). Code objects are loaded and kernels
run by the simulator, synchronously; a kernel's failure is kept and reported by the next
synchronising call on its device, as an asynchronous GPU error is.

Configuration (read once, when the library is first used):
  HIP_STANDIN_DEVICES  comma-separated gcnArchNames (default 'gfx942:sramecc+:xnack-,gfx950:sramecc+:xnack-')
  HIP_STANDIN_MEMORY   bytes of memory per device (default 4 GiB; kept in host RAM)

`STATS` counts what the runtime did, for tests to check which path a call took.
"""

import ctypes
import functools
import os
import sys
import threading
import traceback
from ctypes import POINTER, c_char, c_char_p, c_int, c_uint32, c_uint64, c_void_p

import numpy as np

from hkjit import targets
from hkjit.sim.backend import SimDevice
from hkjit.sim.errors import SimError, SimHazardError
from hkjit.sim.loader import CodeObject
from hkjit.sim.memory import BASE

SUCCESS, INVALID_VALUE, OUT_OF_MEMORY = 0, 1, 2
INVALID_DEVICE_FUNCTION, INVALID_IMAGE, NO_BINARY_FOR_GPU = 98, 200, 209
INVALID_CONFIGURATION, INVALID_HANDLE, NOT_FOUND = 9, 400, 500
ILLEGAL_ADDRESS, LAUNCH_FAILURE, UNKNOWN = 700, 719, 999
H2H, H2D, D2H, D2D, DEFAULT = range(5)

DEVICE_SPAN = 1 << 38        # address range of one device (256 GiB, inside the 47-bit user space)
PRODUCTS = {"gfx942": ("AMD Instinct MI300X (hkjit simulator)", 2_100_000, 9, 4),    # name, clock kHz, major, minor
            "gfx950": ("AMD Instinct MI355X (hkjit simulator)", 2_400_000, 9, 5)}
STATS = {"launches": {}, "module_loads": {}, "rejected_images": 0, "faults": 0}


def _say(message):
    print(f"hip stand-in: {message}", file=sys.stderr, flush=True)


class Device:
    def __init__(self, index, arch_name, capacity):
        self.index, self.arch_name, self.capacity = index, arch_name, capacity
        self.target = targets.from_gcn_arch_name(arch_name)
        self.sim = SimDevice(self.target.arch)
        self.sim.memory.next = BASE + index * DEVICE_SPAN
        self.used = 0
        self.buffers = {}          # base address -> SimBuffer
        self.fault = None          # (hipError_t, message) of a failed kernel, until reported

    def locate(self, addr):
        """(allocation, byte offset) of a device address on this device, or None."""
        alloc = self.sim.memory.find(addr)
        return (alloc, addr - alloc.base) if alloc is not None else None


class Runtime:
    def __init__(self):
        names = os.environ.get("HIP_STANDIN_DEVICES", "gfx942:sramecc+:xnack-,gfx950:sramecc+:xnack-")
        capacity = int(os.environ.get("HIP_STANDIN_MEMORY", str(4 << 30)))
        if capacity > DEVICE_SPAN // 2:
            raise ValueError(f"HIP_STANDIN_MEMORY={capacity}: at most {DEVICE_SPAN // 2} bytes per device")
        self.devices = [Device(i, n.strip(), capacity) for i, n in enumerate(names.split(",")) if n.strip()]
        self.modules = {}          # id -> (device, CodeObject)
        self.functions = {}        # id -> (device, SimKernel, explicit argument bytes, argument layout)
        self.next_id = 1
        self.lock = threading.RLock()

    def _id(self):
        self.next_id += 1
        return self.next_id

    def device_of(self, addr):
        for dev in self.devices:
            where = dev.locate(addr)
            if where is not None:
                return dev, where
        return None, None

    # --- devices -----------------------------------------------------------------------------------
    def device_count(self, count):
        count[0] = len(self.devices)
        return SUCCESS

    def device_info(self, index, name, arch, numbers):
        dev = self.devices[index]
        product, clock_khz, major, minor = PRODUCTS[dev.target.arch]
        ctypes.memmove(name, product.encode() + b"\0", len(product) + 1)
        ctypes.memmove(arch, dev.arch_name.encode() + b"\0", len(dev.arch_name) + 1)
        for i, v in enumerate((dev.capacity, dev.target.compute_units, dev.target.smem_per_block, clock_khz,
                               major, minor)):
            numbers[i] = v
        return SUCCESS

    # --- memory ------------------------------------------------------------------------------------
    def malloc(self, index, size, out):
        dev = self.devices[index]
        if dev.used + size > dev.capacity:
            return OUT_OF_MEMORY
        buf = dev.sim.alloc(size)
        dev.buffers[buf.ptr] = buf
        dev.used += size
        out[0] = buf.ptr
        return SUCCESS

    def free(self, ptr):
        for dev in self.devices:
            buf = dev.buffers.pop(ptr, None)
            if buf is not None:
                dev.sim.free(buf)
                dev.used -= buf.nbytes
                return SUCCESS
        _say(f"hipFree({ptr:#x}): not the start of a live allocation")
        return INVALID_VALUE

    def mem_info(self, index, free, total):
        dev = self.devices[index]
        free[0], total[0] = dev.capacity - dev.used, dev.capacity
        return SUCCESS

    def _span(self, addr, size, what):
        """(device, writable uint8 view) of `size` bytes at a device address, or (None, None) when the
        address is in no device's memory; raises ValueError when it runs past its allocation."""
        dev, where = self.device_of(addr)
        if dev is None:
            return None, None
        alloc, off = where
        if off + size > alloc.nbytes:
            raise ValueError(f"{what} of {size} bytes at {addr:#x} runs past its {alloc.nbytes}-byte allocation")
        return dev, alloc.u8[off:off + size]

    def memcpy(self, dst, src, size, kind):
        try:
            ddev, dview = self._span(dst, size, "copy destination")
            sdev, sview = self._span(src, size, "copy source")
        except ValueError as e:
            _say(f"hipMemcpy: {e}")
            return INVALID_VALUE
        wants = {H2H: (False, False), H2D: (True, False), D2H: (False, True), D2D: (True, True)}
        if kind != DEFAULT and wants[kind] != (ddev is not None, sdev is not None):
            _say(f"hipMemcpy: kind {kind} does not match the pointers (destination {dst:#x} is "
                 f"{'device' if ddev else 'host'} memory, source {src:#x} is {'device' if sdev else 'host'} memory)")
            return INVALID_VALUE
        for dev in {d for d in (ddev, sdev) if d is not None}:
            err = self._report_fault(dev)
            if err:
                return err
        if dview is None:
            dview = np.ctypeslib.as_array((ctypes.c_uint8 * size).from_address(dst))
        if sview is None:
            sview = np.ctypeslib.as_array((ctypes.c_uint8 * size).from_address(src))
        dview[:] = sview
        return SUCCESS

    # --- code objects and launches -------------------------------------------------------------------
    def module_load(self, index, image, size, out):
        dev = self.devices[index]
        try:
            co = CodeObject(ctypes.string_at(image, size))
        except SimError as e:
            STATS["rejected_images"] += 1
            _say(f"hipModuleLoadData: not a loadable code object: {e}")
            return INVALID_IMAGE
        target = co.metadata.get("amdhsa.target", "")
        if not _compatible(target, dev.arch_name):
            STATS["rejected_images"] += 1
            _say(f"hipModuleLoadData: the code object is for {target or 'no target'}, device {index} is "
                 f"{dev.arch_name}")
            return NO_BINARY_FOR_GPU
        mid = self._id()
        self.modules[mid] = (dev, co)
        STATS["module_loads"][index] = STATS["module_loads"].get(index, 0) + 1
        out[0] = mid
        return SUCCESS

    def module_unload(self, mid):
        return SUCCESS if self.modules.pop(mid, None) is not None else INVALID_HANDLE

    def module_function(self, mid, name, out):
        dev, co = self.modules[mid]
        name = name.decode()
        if name not in co.kernel_names():
            return NOT_FOUND
        kernel = dev.sim.load(co.data, name)
        explicit = [a for a in kernel.kernel.meta.get(".args", []) if not a.get(".value_kind", "").startswith("hidden_")]
        layout = [(int(a[".offset"]), int(a[".size"])) for a in explicit]
        fid = self._id()
        self.functions[fid] = (dev, kernel, max((o + s for o, s in layout), default=0), layout)
        out[0] = fid
        return SUCCESS

    def launch(self, fid, dims, dynamic_lds, args, args_size, params):
        dev, kernel, explicit_bytes, layout = self.functions[fid]
        grid, block = tuple(dims[0:3]), tuple(dims[3:6])
        meta, desc = kernel.kernel.meta, kernel.kernel.descriptor
        threads = block[0] * block[1] * block[2]
        if min(grid) < 1 or min(block) < 1 or threads > 1024:
            return INVALID_CONFIGURATION
        if threads > int(meta.get(".max_flat_workgroup_size", 1024)):
            _say(f"launch of {kernel.name}: {threads} threads per block, the kernel allows "
                 f"{meta.get('.max_flat_workgroup_size')}")
            return INVALID_VALUE
        if desc.group_segment_fixed_size + dynamic_lds > dev.target.smem_per_block:
            return INVALID_VALUE
        if args:
            if args_size != explicit_bytes:
                _say(f"launch of {kernel.name}: the argument buffer is {args_size} bytes, the kernel's arguments "
                     f"take {explicit_bytes}")
                return INVALID_VALUE
            data = ctypes.string_at(args, args_size)
        else:
            buf = bytearray(explicit_bytes)
            for i, (off, size) in enumerate(layout):
                if not params or not params[i]:
                    return INVALID_VALUE
                buf[off:off + size] = ctypes.string_at(params[i], size)
            data = bytes(buf)
        STATS["launches"][dev.index] = STATS["launches"].get(dev.index, 0) + 1
        try:
            kernel.launch(grid, block, dynamic_lds, data)
        except SimError as e:
            oob = isinstance(e, SimHazardError) and "out-of-bounds" in getattr(e, "message", "")
            dev.fault = (ILLEGAL_ADDRESS if oob else LAUNCH_FAILURE, str(e))
            STATS["faults"] += 1
            _say(f"kernel {kernel.name} failed on device {dev.index}: {e}")
        return SUCCESS

    def _report_fault(self, dev):
        fault, dev.fault = dev.fault, None
        return fault[0] if fault else SUCCESS

    def synchronize(self, index):
        return self._report_fault(self.devices[index])


def _compatible(code_target, device_arch_name):
    """Whether a code object built for `code_target` ('amdgcn-amd-amdhsa--gfx942:sramecc+:xnack-')
    runs on a device whose gcnArchName is `device_arch_name`: same processor, and every feature the
    code object fixes (+ or -) set the same way on the device; one it leaves out runs either way."""
    proc = code_target.rpartition("--")[2] or code_target
    arch, *features = proc.split(":")
    dev_arch, *dev_features = device_arch_name.split(":")
    if arch != dev_arch:
        return False
    dev = {f[:-1]: f[-1] for f in dev_features}
    return all(dev.get(f[:-1], f[-1]) == f[-1] for f in features)


# --- the table the C library calls ----------------------------------------------------------------
_F = ctypes.CFUNCTYPE
_OPS = [
    ("device_count", _F(c_int, POINTER(c_int))),
    ("device_info", _F(c_int, c_int, POINTER(c_char), POINTER(c_char), POINTER(c_uint64))),
    ("malloc", _F(c_int, c_int, c_uint64, POINTER(c_uint64))),
    ("free", _F(c_int, c_uint64)),
    ("memcpy", _F(c_int, c_uint64, c_uint64, c_uint64, c_int)),
    ("mem_info", _F(c_int, c_int, POINTER(c_uint64), POINTER(c_uint64))),
    ("module_load", _F(c_int, c_int, c_void_p, c_uint64, POINTER(c_uint64))),
    ("module_unload", _F(c_int, c_uint64)),
    ("module_function", _F(c_int, c_uint64, c_char_p, POINTER(c_uint64))),
    ("launch", _F(c_int, c_uint64, POINTER(c_uint32), c_uint32, c_void_p, c_uint64, POINTER(c_void_p))),
    ("synchronize", _F(c_int, c_int)),
]


class _Table(ctypes.Structure):
    _fields_ = [(name, proto) for name, proto in _OPS]


RUNTIME = None
_callbacks = []   # the ctypes thunks must live as long as the process


def _guarded(method):
    """A callback that never lets an exception cross into C (ctypes would return 0: success)."""
    @functools.wraps(method)
    def call(*args):
        try:
            with RUNTIME.lock:
                return method(*args)
        except Exception:
            _say(f"internal error in {method.__name__}:\n{traceback.format_exc()}")
            return UNKNOWN
    return call


def install(table_address):
    """Called by libamdhip64.so on its first use: fill its table of entry points."""
    global RUNTIME
    RUNTIME = Runtime()
    table = _Table.from_address(table_address)
    for name, proto in _OPS:
        thunk = proto(_guarded(getattr(RUNTIME, name)))
        _callbacks.append(thunk)
        setattr(table, name, thunk)
