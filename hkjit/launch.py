"""The one launch path every op shares: from a public call's arrays to a kernel launch.

    launch.call(op, (x, weight, out), (eps,), (), device, compiler, tiles)

1. Arrays are described (interop) and the device chosen (the arrays' GPU, else `device=`, else
   HKJIT_DEVICE, else the first GPU). Host arrays are staged: dense copies uploaded, outputs copied
   back into the caller's arrays or new ones of the caller's kind.
2. A call *signature* (each array's dtype, shape, strides, 16-byte alignment class and device,
   the op's options, tiles, compiler) picks a memoised `Launcher`; a new signature binds the op
   (`op.bind`), plans it for the device's target, loads the kernel (jit) and records the
   specialisation for HKJIT_RECORD manifests.
3. The launcher allocates missing outputs in the caller's framework, fills and packs the argument
   struct (packed blocks memoised per pointers and scalars: re-encoding TMA descriptors costs µs),
   gives each stream its own workspace (small, zeroed, kept) and each call its scratch (torch
   callers: torch's caching allocator, freed after the launch; others: one buffer per device and
   stream, `SharedScratch`), and launches on the caller's current stream.
4. torch tensors take a shorter repeat path: a call whose tensors have the properties of an
   earlier one skips describing, device choice and the signature, since those properties decided
   all of them. From the second such call on CUDA, the native path (hkjit/native: C, built on
   first use) takes these calls: `call` becomes its C function, which comes back here for
   anything it does not match.
5. Arrays without memory here (torch meta and fake tensors, JAX tracers inside jax.jit) go to the
   symbolic route the frameworks layer installs (hkjit/frameworks: torch.library ops, jax.ffi):
   the kernel is bound and compiled from their shapes, and launched later by the framework.
6. CUDA graph capture: a call that would bind or compile (a first call of its signature) while its
   stream is capturing is refused (GraphCaptureError: warm up first); workspaces and scratch of
   torch callers come from torch's caching allocator, which capture allows (into the graph's pool)
   and replays keep alive; a shared scratch a capture used is never freed.
"""

from __future__ import annotations

import ctypes
import math
import os
import sys

from . import interop, jit, runtime
from .errors import DeviceError, GraphCaptureError, InvalidArgumentError
from .interop import Array

_launchers: dict = {}
_fast: dict = {}
_shared_scratch: dict = {}  # (device kind, index, stream) -> SharedScratch
TORCH = "torch"             # Launcher.run's `scratch`: from torch's caching allocator on the launch stream
SCRATCH_ROUND = 2 << 20     # a shared scratch grows in steps of 2 MiB (fewer regrowths, each a stream sync)
_torch_tensor = None        # torch.Tensor once a torch call has succeeded (the repeat path's type test)
_torch_parameter = None     # torch.nn.Parameter then: parameters (norm weights) take the repeat path too
_native = None              # the native table (hkjit/native) once a repeat call used it; False: none here
_native_allowed = True      # use_native(False) turns it off in this process
_native_call = None         # the native table's bound `call`, made once (its identity is what
                            # torch.compile's substitution for `call` is registered on)
_symbolic = None            # the frameworks layer's route for arrays without memory (set_symbolic_route)
_is_symbolic = None
_tracing = None             # torch.compiler.is_compiling once torch._dynamo is loaded (set_tracing)
call_listeners: list = []   # called with each new value of `call` (hkjit/frameworks registers it with dynamo)
MAX_PACKED = 64


class Launcher:
    """A loaded kernel bound to one call signature."""
    __slots__ = ("op", "kernel", "plan", "binding", "device", "block", "packed", "workspaces", "native", "buffers",
                 "torch_device")

    def __init__(self, op, kernel, plan, binding, device):
        self.op, self.kernel, self.plan, self.binding, self.device = op, kernel, plan, binding, device
        self.block = (plan.threads, 1, 1)
        self.packed, self.workspaces, self.buffers = {}, {}, {}
        self.native = None             # where the native path writes pointers (hkjit/native), once measured
        self.torch_device = None       # torch.device of a torch caller's scratch, made on first use

    def run(self, ptrs: tuple, scalars: tuple, stream, scratch=None) -> None:
        """Launch on `stream`. Where the plan has scratch, `scratch` says whence: TORCH (`stream` is
        torch's current stream of this device: a tensor of torch's caching allocator, released on
        return, which is safe because that allocator hands a block on only to work queued after
        this launch on the same stream), a device pointer the caller keeps alive until the launch
        has run (staged calls), or None: the buffer shared by the launches on (device, stream)."""
        plan = self.plan
        ws = (self.workspaces.get(stream) or self._workspace(stream)) if plan.workspace_bytes else 0
        if plan.scratch_bytes:         # `held`: a torch caller's scratch, back to the allocator on return
            held, scratch = self._scratch(stream, scratch)
            key = (ptrs, scalars, ws, scratch)
        else:
            held, scratch, key = None, 0, (ptrs, scalars, ws)
        packed = self.packed.get(key)
        if packed is None:
            _check_scalars(self.op, scalars)   # here, not per call: a new scalar value always packs
            named = dict(zip(self.op.array_names, ptrs), workspace=ws, scratch=scratch)
            packed = self.kernel.pack(plan.fill(**self.binding.args(named, scalars)))
            if len(self.packed) >= MAX_PACKED:
                self.packed.clear()
            self.packed[key] = packed
        self.kernel.launch_packed(plan.grid, self.block, plan.dynamic_smem, packed, stream)
        del held

    def _scratch(self, stream, source) -> tuple:
        """(what keeps it alive until the launch is queued, pointer) of this call's scratch."""
        if source is TORCH:
            torch = sys.modules["torch"]
            if self.torch_device is None:
                self.torch_device = torch.device("cuda", self.device.index)
            buf = torch.empty(self.plan.scratch_bytes, dtype=torch.uint8, device=self.torch_device)
            return buf, buf.data_ptr()
        if source is not None:
            return None, source
        shared = _shared_scratch.get((self.device.kind, self.device.index, stream))
        if shared is None:
            shared = _shared_scratch[(self.device.kind, self.device.index, stream)] = SharedScratch(self.device,
                                                                                                    stream)
        return None, shared.get(self.plan.scratch_bytes, self.op.name)

    def _workspace(self, stream) -> int:
        """One workspace per stream (launches on one stream are ordered, so they share it), kept for
        the launcher's lifetime; its leading `workspace_zeroed` bytes start at zero and every
        launch leaves them so. Where torch drives this GPU the workspace is a torch tensor: its
        caching allocator may allocate during CUDA graph capture (cuMemAlloc may not), and the
        tensor, held here, keeps the memory a captured graph replays with."""
        nbytes, zeroed = self.plan.workspace_bytes, self.plan.workspace_zeroed
        torch = sys.modules.get("torch")
        if torch is not None and self.device.kind in ("cuda", "rocm") and torch.cuda.is_initialized():
            buf = torch.empty(nbytes, dtype=torch.uint8, device=f"cuda:{self.device.index}")
            if zeroed:          # on the launch stream, so a capture records it and replays it first
                with torch.cuda.stream(torch.cuda.ExternalStream(stream, device=buf.device)):
                    buf[:zeroed].zero_()
            self.buffers[stream] = buf
            ptr = buf.data_ptr()
        else:
            refuse_capture(self.op.name, self.device, stream, "allocate its workspace")
            ptr = self.device.alloc(nbytes)
            if zeroed:
                zeros = (ctypes.c_ubyte * zeroed)()
                self.device.copy_in(ptr, ctypes.addressof(zeros), zeroed)
        self.workspaces[stream] = ptr
        return ptr


class SharedScratch:
    """The scratch of the launches on one (device, stream) whose caller has no stream-ordered
    allocator hkjit uses (CuPy, eager JAX, ...): one buffer, grown to the largest call and kept.
    Launches on one stream run in order and none leaves anything in its scratch for the next, so
    one buffer serves them all. Growing waits for the stream (launches queued on it may still use
    the old buffer) and frees the old one, except where a CUDA graph was captured with it: the
    graph's replays still use it, so it is kept for the process's life. Growing while the stream
    is capturing is refused (GraphCaptureError: warm up with the largest shape first)."""
    __slots__ = ("device", "stream", "ptr", "nbytes", "captured", "kept")

    def __init__(self, device, stream):
        self.device, self.stream = device, stream
        self.ptr = self.nbytes = 0
        self.captured = False          # a capture has recorded launches that use `ptr`
        self.kept = []                 # earlier buffers a captured graph may still replay with

    def get(self, nbytes: int, op_name: str) -> int:
        """A pointer to at least `nbytes` bytes for one launch queued next on this stream."""
        capturing = getattr(self.device, "is_capturing", None)
        capturing = capturing is not None and capturing(self.stream)
        if nbytes > self.nbytes:
            if capturing:            # cuMemAlloc would break the capture
                raise GraphCaptureError(
                    f"{op_name}: this call needs {nbytes} bytes of scratch, more than the {self.nbytes} bytes the "
                    "launches on its stream share, while the stream is capturing a CUDA graph; before capturing, "
                    "run the largest call the graph makes on this stream once (a warm-up)")
            self.release()
            size = -(-nbytes // SCRATCH_ROUND) * SCRATCH_ROUND
            self.ptr, self.nbytes = self.device.alloc(size), size
        self.captured = self.captured or capturing
        return self.ptr

    def release(self) -> None:
        """Give the buffer back (after the launches queued on the stream), or keep it where a
        captured graph uses it."""
        if not self.ptr:
            return
        if self.captured:
            self.kept.append((self.ptr, self.nbytes))
        else:
            self.device.synchronize(self.stream)
            self.device.free(self.ptr)
        self.ptr = self.nbytes = 0
        self.captured = False


def shared_scratch() -> dict:
    """{(device kind, index, stream): (bytes held, bytes kept for captured graphs)} of the shared
    scratch buffers in this process (`SharedScratch`)."""
    return {k: (s.nbytes, sum(n for _, n in s.kept)) for k, s in _shared_scratch.items()}


def refuse_capture(op_name: str, device, stream, what: str) -> None:
    """GraphCaptureError when `stream` is capturing a CUDA graph: compiling, loading a module or
    cuMemAlloc there would break the capture (or be captured as nothing)."""
    capturing = getattr(device, "is_capturing", None)
    if capturing is not None and capturing(stream):
        raise GraphCaptureError(
            f"{op_name}: this call would {what} while its stream is capturing a CUDA graph; run the "
            "call once with the same shapes, dtypes and strides before capturing (a warm-up), so the "
            "kernel is compiled and loaded outside the capture")


def set_symbolic_route(route, is_symbolic=None) -> None:
    """`route(op, values, scalars, options, device, compiler, tiles)` takes calls whose arrays
    have no memory here (it returns NotImplemented for the others), `is_symbolic(value)` says
    whether one array is such; None removes them."""
    global _symbolic, _is_symbolic
    _symbolic, _is_symbolic = route, is_symbolic


def set_tracing(is_tracing) -> None:
    """`is_tracing()`: whether torch.compile is tracing (set once torch._dynamo is imported)."""
    global _tracing
    _tracing = is_tracing


def tracing() -> bool:
    """Whether torch.compile is tracing the caller (ops pick their traceable form then)."""
    f = _tracing
    return f is not None and f()


def symbolic(values) -> bool:
    """Whether any of `values` has no memory here (meta or fake tensors, JAX tracers)."""
    f = _is_symbolic
    return f is not None and any(v is not None and f(v) for v in values)


def call(op, values: tuple, scalars: tuple = (), options: tuple = (), device=None, compiler=None,
         tiles: dict | None = None):
    """Run `op` on `values` (its arrays in `op.array_names` order, None where absent), run-time
    `scalars` (in `op.scalar_names` order) and compile-time `options` ((name, value) pairs)."""
    torch_tensor = _torch_tensor
    if torch_tensor is not None and device is None and compiler is None and not tiles:
        # The repeat path: key on exactly the properties the first call decided everything from.
        key, ptrs = [op.name, options], []
        for t in values:
            if t is None:
                key.append(None)
                ptrs.append(0)
            elif type(t) is torch_tensor or type(t) is _torch_parameter:
                p = t.data_ptr()
                ptrs.append(p)
                key += (t.dtype, t.shape, t.stride(), p & 15, t.get_device())
            else:
                break
        else:
            try:
                entry = _fast.get(tuple(key))
            except TypeError:          # an unhashable option: the slow path says what is wrong
                entry = None
            if entry is not None:
                return entry.run(values, ptrs, scalars)
    route = _symbolic
    if route is not None:          # meta / fake tensors, JAX tracers: the framework's own op
        result = route(op, values, scalars, options, device, compiler, tiles)
        if result is not NotImplemented:
            return result
    for name, v in (tiles or {}).items():
        if isinstance(v, bool) or not isinstance(v, (int, str)):
            raise InvalidArgumentError(f"{op.name}: tile override {name}={v!r}; tile overrides are ints "
                                       "(mfma takes a string such as '16x16x32')")
    _check_scalars(op, scalars)
    options_dict = dict(options)
    described = tuple(None if v is None else interop.describe(v) for v in values)
    try:
        dev = device_for(op.name, described, device)
    except DeviceError:
        op.bind(dict(zip(op.array_names, described)), options_dict, None)   # bad input is said first
        raise
    template = next(a for a in described if a is not None)
    if template.device == "cpu":
        return _call_staged(op, described, scalars, options_dict, dev, compiler, tiles or {})
    _check_writable(op, described)
    stream = runtime.stream_for(dev, template.framework)
    launcher = _launcher(op, described, options_dict, dev, compiler, tiles or {}, stream)
    binding = launcher.binding
    if binding.aligned_copies:
        return _call_aligned(op, described, binding, scalars, options, compiler, tiles)
    objs = dict(zip(op.array_names, (a.caller_object if a is not None else None for a in described)))
    ptrs = []
    for name, a in zip(op.array_names, described):
        if a is None and name in binding.outputs:
            shape, dt = binding.outputs[name]
            objs[name] = interop.empty(template, shape, dt)
            a = interop.describe(objs[name])
        ptrs.append(a.ptr if a is not None else 0)
    launcher.run(tuple(ptrs), scalars, stream, TORCH if template.framework == "torch" else None)
    if template.framework == "jax":
        dev.synchronize(stream)   # JAX does not know this stream: finish before it reads the result
    elif template.framework == "torch" and device is None and compiler is None and not tiles:
        _remember_fast(op, values, options, launcher, dev)
    return _result(binding, objs)


def miss_hint(op_name: str, target_id: str, request: dict):
    """What an offline miss tells the user: the manifest line that ships this kernel."""
    def hint():
        from . import manifest   # here: only an offline miss writes a manifest line
        return ("To ship it, add this line to the precompile manifest's kernels and rebuild the bundle:\n  "
                + manifest.manifest_line(op_name, target_id, request))
    return hint


def _result(binding, objs):
    if len(binding.returns) == 1:
        return objs[binding.returns[0]]
    return tuple(objs[n] for n in binding.returns)


def _check_scalars(op, scalars):
    for name, s in zip(op.scalar_names, scalars):
        if isinstance(s, bool) or not isinstance(s, (int, float)) or not math.isfinite(s):
            raise InvalidArgumentError(f"{op.name}: {name}={s!r}; give a finite real number")


def _check_writable(op, described):
    for name, a in zip(op.array_names, described):
        if a is not None and name in op.output_names and not interop.writable(a):
            fix = "" if name in op.inplace_names else ", or leave it out to get a new one"
            raise InvalidArgumentError(f"{op.name}: {name} is read-only (or immutable, as JAX arrays are); "
                                       f"pass a writable array{fix}")


def signature(op, described, options, dev, compiler, tiles) -> tuple:
    """What decides the kernel and its argument layout: never a data pointer, only its alignment."""
    arrays = tuple(None if a is None else (a.dtype.name, a.shape, a.strides, a.ptr & 15) for a in described)
    return (op.name, arrays, tuple(sorted(options.items())), dev.kind, dev.index, compiler,
            tuple(sorted(tiles.items())))


def _launcher(op, described, options, dev, compiler, tiles, stream=None) -> Launcher:
    sig = signature(op, described, options, dev, compiler, tiles)
    try:
        launcher = _launchers.get(sig)
    except TypeError:                  # an unhashable option value: let the op say which
        op.bind(dict(zip(op.array_names, described)), options, dev)
        raise InvalidArgumentError(f"{op.name}: options {options!r} must be names, numbers or dtypes") from None
    if launcher is None:
        binding = op.bind(dict(zip(op.array_names, described)), options, dev)
        undeclared = [n for n in binding.updates if n not in op.updated_names]
        if undeclared:                 # compilers would not know the kernel writes them: an op bug
            raise InvalidArgumentError(f"{op.name}: its kernel for {dev.target.id} writes {', '.join(undeclared)}, "
                                       "which the op does not declare in updated_names")
        if stream is not None:
            refuse_capture(op.name, dev, stream, "bind, compile and load its kernel (a first call of this signature)")
        kernel = plan = None
        if not binding.aligned_copies:
            request = {**binding.request, **tiles}
            plan = op.plan(dev.target, **request)
            if os.environ.get("HKJIT_RECORD"):
                from . import deploy   # only when recording: keeps `import hkjit` and a warm start light
                deploy.record(op.name, dev.target.id, request)
            kernel = jit.load_spec(plan.spec, dev, plan.dynamic_smem, compiler, miss_hint(op.name, dev.target.id,
                                                                                          request))
        launcher = Launcher(op, kernel, plan, binding, dev)
        _launchers[sig] = launcher
    return launcher


def _call_aligned(op, described, binding, scalars, options, compiler, tiles):
    """Operands the kernel cannot read in place (e.g. AMD direct-to-LDS loads need 4-byte aligned
    rows): run on copies with 16-byte aligned rows (torch tensors only)."""
    arrays = {}
    for name, a in zip(op.array_names, described):
        if a is not None and name in binding.aligned_copies:
            if a.framework != "torch":
                raise InvalidArgumentError(
                    f"{op.name}: {name}'s base pointer or leading dimension is not aligned for this target; "
                    "pass contiguous arrays whose rows are a multiple of 16 bytes")
            arrays[name] = interop.aligned_copy(a)
        else:
            arrays[name] = a.caller_object if a is not None else None
    return call(op, tuple(arrays.values()), scalars, options, None, compiler, tiles)


def device_for(op_name: str, arrays, device):
    """The device of a call: the arrays' GPU (all must agree), else `device=`, else the default."""
    present = [a for a in arrays if a is not None]
    gpu = [a for a in present if a.device != "cpu"]
    if gpu:
        kinds = {(a.device, a.index) for a in gpu}
        if len(kinds) > 1:
            raise DeviceError(f"{op_name}: arrays are on different devices "
                              + ", ".join(f"{k}:{i}" for k, i in sorted(kinds)) + "; move them to one device first")
        kind, index = kinds.pop()
        if len(gpu) != len(present):
            raise DeviceError(f"{op_name}: some arrays are on {kind}:{index} and some in host memory; "
                              "move them to one device first")
        if device is not None and runtime.parse(device) != (kind, str(index)):
            raise DeviceError(f"{op_name}: device={device!r} but the arrays are on {kind}:{index}")
        return runtime.get(kind, index)
    return runtime.from_string(device) if device is not None else runtime.default_device()


# --- host arrays: staged through device buffers -------------------------------------------------
def _call_staged(op, described, scalars, options, dev, compiler, tiles):
    """Host (NumPy / CPU torch) arrays: dense copies (rows padded to 16 bytes, each array in its own
    layout) go to the device, the kernel runs, outputs come back into the caller's arrays or new
    host arrays of the caller's kind."""
    _check_writable(op, described)
    template = next(a for a in described if a is not None)
    with interop.DeviceStaging(dev) as stage:
        staged, hosts = [], []
        for a in described:
            if a is None:
                staged.append(None)
                hosts.append(None)
                continue
            host, ptr, nbytes, strides = interop.dense_host_layout(a, op.stages_transposed)
            hosts.append((host, ptr, nbytes))
            staged.append(Array(stage.upload(ptr, nbytes), a.shape, strides, a.dtype, dev.kind, 0, "staged", None))
        launcher = _launcher(op, staged, options, dev, compiler, tiles)
        binding = launcher.binding
        if binding.aligned_copies:   # staged copies have 16-byte aligned rows: an op bug if reached
            raise InvalidArgumentError(f"{op.name}: staged arrays {binding.aligned_copies} still need copies")
        objs, downloads = {}, []
        for i, (name, a) in enumerate(zip(op.array_names, described)):
            if a is None and name in binding.outputs:
                shape, dt = binding.outputs[name]
                obj, host_ptr, nbytes = interop.empty_host(template, shape, dt)
                staged[i] = Array(stage.alloc(nbytes), shape, interop.contiguous_strides(shape), dt, dev.kind, 0,
                                  "staged", None)
                objs[name] = obj
                downloads.append((host_ptr, staged[i].ptr, nbytes, None))
            else:
                objs[name] = a.caller_object if a is not None else None
                if a is not None and (name in op.output_names or name in binding.updates):
                    host, host_ptr, nbytes = hosts[i]
                    downloads.append((host_ptr, staged[i].ptr, nbytes, (a, host)))
        scratch = stage.alloc(launcher.plan.scratch_bytes) if launcher.plan.scratch_bytes else None
        launcher.run(tuple(s.ptr if s is not None else 0 for s in staged), scalars, 0, scratch)
        dev.synchronize(0)
        for host_ptr, dev_ptr, nbytes, back in downloads:
            stage.download(host_ptr, dev_ptr, nbytes)
            if back is not None:
                interop.copy_back(*back)
    return _result(binding, objs)


# --- the torch repeat-call path -------------------------------------------------------------------
class _FastEntry:
    """What a repeat call needs: the launcher (its packed blocks and launch geometry copied here, so
    a repeat launch is one dict lookup and one driver call), outputs to allocate, what to return."""
    __slots__ = ("launcher", "packed", "launch", "grid", "block", "smem", "alloc", "empty", "returns", "single",
                 "index", "stream_of", "op", "options", "native")

    def run(self, values, ptrs, scalars):
        given, made = values, None
        if self.alloc:
            values, made = list(values), {}
            for i, shape, dtype, dev in self.alloc:
                values[i] = made[i] = self.empty(shape, dtype=dtype, device=dev)
                ptrs[i] = values[i].data_ptr()
        ptrs = tuple(ptrs)
        stream = self.stream_of(self.index)
        packed = self.packed.get((ptrs, scalars, 0))
        if packed is None:             # new pointers or scalars, a workspace or scratch: the launcher packs
            self.launcher.run(ptrs, scalars, stream, TORCH)
        else:
            self.launch(self.grid, self.block, self.smem, packed, stream)
        if self.native is None:        # the second call of this signature: from now on, natively
            self.native = _go_native(self, given, ptrs, scalars, made or {})
        if self.single is not None:
            return values[self.single]
        return tuple(values[i] for i in self.returns)


def _remember_fast(op, values, options, launcher, dev):
    global _torch_tensor, _torch_parameter
    if dev.kind not in ("cuda", "rocm"):
        return
    torch = sys.modules["torch"]
    if any(v is not None and type(v) is not torch.Tensor and type(v) is not torch.nn.Parameter for v in values):
        return
    _torch_tensor, _torch_parameter = torch.Tensor, torch.nn.Parameter
    key = [op.name, options]
    for t in values:
        key += (None,) if t is None else (t.dtype, t.shape, t.stride(), t.data_ptr() & 15, t.get_device())
    names = op.array_names
    e = _FastEntry()
    e.launcher, e.index, e.op, e.options = launcher, dev.index, op, options
    e.native = None if dev.kind == "cuda" and _native_allowed else False
    e.packed = launcher.packed if not (launcher.plan.workspace_bytes or launcher.plan.scratch_bytes) else {}
    e.launch, e.grid, e.block, e.smem = (launcher.kernel.launch_packed, launcher.plan.grid, launcher.block,
                                         launcher.plan.dynamic_smem)
    e.empty = torch.empty
    device = next(v.device for v in values if v is not None)
    e.alloc = tuple((names.index(n), shape, getattr(torch, dt.name), device)
                    for n, (shape, dt) in launcher.binding.outputs.items() if values[names.index(n)] is None)
    e.returns = tuple(names.index(n) for n in launcher.binding.returns)
    e.single = e.returns[0] if len(e.returns) == 1 else None
    e.stream_of = torch._C._cuda_getCurrentRawStream
    if len(_fast) > 4096:
        _fast.clear()
    _fast[tuple(key)] = e


_python_call = call                    # the native path's fallback for what it does not match


def _go_native(entry, values, ptrs, scalars, made) -> bool:
    """Hand a signature's repeat calls to the native path (hkjit/native): from now on `call` is its
    C function. False where that cannot be (no extension here, a workspace, ...): Python keeps it."""
    global _native, _native_call
    if _native is None:
        _native = _start_native()
    if not _native or not _native_allowed:
        return False
    if not remember_native(_native, entry.op, values, entry.options, scalars, ptrs, entry.launcher, made):
        return False
    if _native_call is None:
        _native_call = _native.call
    if call is not _native_call:
        _set_call(_native_call)
    return True


def _set_call(fn) -> None:
    global call
    call = fn
    for listener in call_listeners:
        listener(fn)


def remember_native(table, op, values, options, scalars, ptrs, launcher, made) -> bool:
    """Register a call with a native table (hkjit/native): `values` as the caller passed them,
    `ptrs` the pointers its block holds, `made` the outputs allocated for it (slot -> tensor)."""
    from . import native   # here: a process's first calls never need the native path
    plan, binding, names = launcher.plan, launcher.binding, op.array_names

    def repack(ptrs, scalars) -> bytes:
        """The block for new pointers or scalars, with the Python path's checks and errors."""
        _check_scalars(op, scalars)
        return bytes(plan.fill(**binding.args(dict(zip(names, ptrs), workspace=0, scratch=0), scalars)))
    what = (f"launch of {launcher.kernel.name} (grid {plan.grid}, block {launcher.block}, "
            f"{plan.dynamic_smem} B shared)")
    return native.remember(table, op, values, options, scalars, ptrs, launcher, what, repack, made)


def _start_native():
    from . import native
    ext = native.extension()
    if ext is None:
        return False
    from .runtime import cuda
    driver = native.driver_functions(cuda.function_addresses())
    return native.table(ext, sys.modules["torch"], _python_call, driver) or False


def use_native(on: bool) -> None:
    """Let the native repeat path take calls in this process, or not (HKJIT_NATIVE=0 keeps it
    off for good); the Python path takes over at once. Benchmarks time both in one process."""
    global _native_allowed
    _native_allowed = bool(on)
    _set_call(_python_call)
    _fast.clear()
    if _native:
        _native.clear()


def native_table():
    """The native path's table (hkjit/native's FastPath) in this process, or None."""
    return _native or None


def native_stats() -> dict | None:
    """The native path's counters in this process (hits, misses, repacks, entries), or None where
    it has not started (no repeat call yet, or no extension here: `hkjit.native.why_not`)."""
    return _native.stats() if _native else None


def reset() -> None:
    """Forget every launcher and repeat-call entry (kernels are reloaded on the next call) and give
    back the shared scratch buffers (those no captured graph uses)."""
    _launchers.clear()
    _fast.clear()
    if _native:
        _native.clear()
    for shared in _shared_scratch.values():
        shared.release()


def launchers() -> list:
    """(signature, Launcher) of every launcher this process made (benchmarks read the kernels)."""
    return list(_launchers.items())
