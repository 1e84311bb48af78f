"""Every registered hkjit op as a torch.library op, so torch.compile traces hkjit calls whole.

For each op of the registry (hkjit/ops), all registered on the first traced call:

    hkjit::<op>(Tensor? <input>, ..., str config) -> Tensor | (Tensor, ...)
    hkjit::<op>.into(Tensor? <array>, ..., Tensor(a!)? <output>, ..., str config) -> ...

`<op>` takes the op's arrays that are not outputs and allocates every output; `.into` takes all of
them, writes the outputs given (out=, in place: declared mutated, so functionalization copes)
and allocates the rest. Arrays an op updates besides its outputs (`Op.updated_names`: the dq that
the sm_90a attention_bwd_dkdv kernel writes) are declared mutated in both forms. Both return one
tensor per output name: the allocated output, or an empty placeholder for an output given or not
asked for (torch ops may neither return a list beside mutated arguments nor alias their inputs);
a traced call hands on an updated array as the argument it passed. `config` is canonical JSON of the
run-time scalars, the compile-time options, tile overrides, device and compiler: constants of a
traced call.

- The real implementation is `launch.call` (the same kernels, repeat path and native path).
- The fake implementation binds the op (`op.bind`) on array descriptions of the meta/fake tensors
  (pointers made up, 256-byte aligned) and gives its outputs' shapes and dtypes: shape inference
  without a GPU, errors on bad input at trace time.
- Ops defining `torch_backward` (attention) get it through torch.library.register_autograd.
- `dispatch` is what dynamo traces in place of `launch.call` (`register_with_dynamo`: a
  substitution for the Python function and for the native path's C function), and what eager
  calls on meta tensors run.
"""

from __future__ import annotations

import json
import threading
from types import SimpleNamespace

import torch

from .. import interop, launch, ops, runtime, targets
from ..dtypes import dtype as to_dtype
from ..errors import DeviceError, HKJitError, InvalidArgumentError
from ..interop import Array

NAMESPACE = "hkjit"
_lib = None
_registered: dict = {}        # op name -> (input positions, output positions)
_lock = threading.Lock()
_configs: dict = {}           # config string -> decoded (a compiled graph's calls parse it once)
_FAKE_BASE = 1 << 32          # made-up device addresses for binding fake tensors (256-byte aligned)


# --- the config string -------------------------------------------------------------------------
def _plain(name, value):
    """An option value as JSON: numbers, strings, bools, None; dtypes (torch.bfloat16, ...) by name."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    try:
        return to_dtype(value).name
    except HKJitError:
        raise InvalidArgumentError(f"option {name}={value!r} cannot be part of a traced hkjit call") from None


def encode(op, scalars, options, device, compiler, tiles) -> str:
    launch._check_scalars(op, scalars)
    body = {"scalars": list(scalars), "options": [[k, _plain(k, v)] for k, v in options],
            "tiles": {k: _plain(k, v) for k, v in (tiles or {}).items()},
            "device": None if device is None else str(device), "compiler": compiler}
    try:
        return json.dumps(body, sort_keys=True, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as e:
        raise InvalidArgumentError(f"{op.name}: a traced call's values must be numbers, names or dtypes: {e}") \
            from None


def decode(config: str):
    """(scalars, options, device, compiler, tiles) of a config string."""
    got = _configs.get(config)
    if got is None:
        body = json.loads(config)
        got = (tuple(body["scalars"]), tuple((k, v) for k, v in body["options"]), body["device"],
               body["compiler"], body["tiles"])
        if len(_configs) > 4096:
            _configs.clear()
        _configs[config] = got
    return got


# --- schemas and registration --------------------------------------------------------------------
def _schema(op, mutating: bool) -> str:
    """The op's torch schema: arrays it writes are `Tensor(x!)?` (each its own alias set), the given
    outputs of `.into` and, in both forms, the arrays it updates (`Op.updated_names`), so
    functionalization and inductor order reads of those after the call (e.g. attention_bwd_dkdv's dq)."""
    args, alias = [], 0
    for name in op.array_names:
        if name in op.output_names and not mutating:
            continue
        if name in op.output_names or name in op.updated_names:
            args.append(f"Tensor({chr(ord('a') + alias)}!)? {name}")
            alias += 1
        else:
            args.append(f"Tensor? {name}")
    n = len(op.output_names)
    returns = "Tensor" if n == 1 else "(" + ", ".join(["Tensor"] * n) + ")"
    return f"{op.name}{'.into' if mutating else ''}({', '.join(args)}, str config) -> {returns}"


def ensure(name: str) -> str:
    """Register hkjit::<name> (both forms); returns `name`. Under dynamo it runs as a constant
    (torch._dynamo.assume_constant_result, see register_with_dynamo).

    The first call registers every op of the registry, not only `name`: a graph torch.compile loads
    from its on-disk cache runs without being traced, and may call ops nothing in this process has
    named yet (attention's backward graph calls hkjit::attention_bwd_dq)."""
    if name in _registered:
        return name
    op = ops.get(name)               # an unknown name fails here, before anything is registered
    with _lock:
        for other in ops.names():
            if other not in _registered:
                _register(op if other == name else ops.get(other))
    return name


def _register(op) -> None:
    global _lib
    if _lib is None:
        _lib = torch.library.Library(NAMESPACE, "FRAGMENT")
    inputs = tuple(i for i, n in enumerate(op.array_names) if n not in op.output_names)
    everything = tuple(range(len(op.array_names)))
    for mutating, positions in ((False, inputs), (True, everything)):
        qualname = op.name + (".into" if mutating else "")
        _lib.define(_schema(op, mutating))
        _lib.impl(qualname, _real(op, positions), "CompositeExplicitAutograd")
        torch.library.register_fake(f"{NAMESPACE}::{qualname}", _fake(op, positions), lib=_lib)
    if hasattr(op, "torch_backward"):
        setup, backward = _autograd(op, inputs)
        torch.library.register_autograd(f"{NAMESPACE}::{op.name}", backward, setup_context=setup, lib=_lib)
    _registered[op.name] = inputs


def _values(op, positions, arrays) -> tuple:
    values = [None] * len(op.array_names)
    for i, a in zip(positions, arrays):
        values[i] = a
    return tuple(values)


def _placeholder(like):
    return torch.empty(0, dtype=torch.uint8, device=like.device)


def _assemble(op, values, options, produced: dict):
    """One tensor per output name: `produced[name]`, or a placeholder."""
    like = next(v for v in values if v is not None)
    outs = tuple(produced[n] if produced.get(n) is not None else _placeholder(like) for n in op.output_names)
    return outs[0] if len(outs) == 1 else outs


def _real(op, positions):
    names = op.array_names

    def real(*args):
        *arrays, config = args
        scalars, options, device, compiler, tiles = decode(config)
        values = _values(op, positions, arrays)
        result = launch.call(op, values, scalars, options, device, compiler, tiles)
        returned = op.returns_for(dict(options))
        result = result if isinstance(result, tuple) else (result,)
        given = {n for n, v in zip(names, values) if v is not None}
        return _assemble(op, values, options, {n: r for n, r in zip(returned, result) if n not in given})
    return real


def _fake(op, positions):
    names = op.array_names

    def fake(*args):
        *arrays, config = args
        scalars, options, device, compiler, tiles = decode(config)
        values = _values(op, positions, arrays)
        devices = {v.device for v in values if v is not None}
        if len(devices) > 1:
            raise DeviceError(f"{op.name}: arrays are on different devices ({', '.join(sorted(map(str, devices)))}); "
                              "move them to one device first")
        described = tuple(None if v is None else _describe(v, i) for i, v in enumerate(values))
        binding = op.bind(dict(zip(names, described)), dict(options), _binding_device(values, device))
        if binding.aligned_copies:    # made-up pointers are aligned: an op that asks anyway is wrong
            raise InvalidArgumentError(f"{op.name}: cannot trace a call whose arrays need aligned copies")
        like = next(v for v in values if v is not None)
        produced = {n: torch.empty(shape, dtype=getattr(torch, dt.name), device=like.device)
                    for n, (shape, dt) in binding.outputs.items()}
        return _assemble(op, values, options, produced)
    return fake


def _describe(t, slot) -> Array:
    """An array description of a meta / fake tensor with a made-up, 256-byte aligned address."""
    kind = "cpu" if t.device.type in ("cpu", "meta") else interop._torch_gpu_kind()
    return Array(_FAKE_BASE * (slot + 1), tuple(t.shape), tuple(t.stride()), interop._dtype_of(t.dtype), kind,
                 t.device.index or 0, "torch", t)


_stand_in = None


def _binding_device(values, device):
    """The device an op binds for (its target and multiprocessors decide tile rules; outputs do not
    depend on them): the tensors' GPU, else `device=` or the default, else an sm_90a stand-in."""
    t = next(v for v in values if v is not None)
    try:
        if t.device.type == "cuda":
            return runtime.get(interop._torch_gpu_kind(), t.device.index or 0)
        return runtime.from_string(device) if device is not None else runtime.default_device()
    except HKJitError:
        global _stand_in
        if _stand_in is None:
            _stand_in = SimpleNamespace(kind="cuda", index=0, target=targets.parse("sm_90a"), multiprocessors=132)
        return _stand_in


def _autograd(op, positions):
    names = op.array_names

    def setup_context(ctx, inputs, output):
        *arrays, config = inputs
        outs = output if isinstance(output, tuple) else (output,)
        ctx.save_for_backward(*arrays, *outs)
        ctx.config = config

    def backward(ctx, *grads):
        saved = ctx.saved_tensors
        arrays, outs = saved[:len(positions)], saved[len(positions):]
        scalars, options, _, _, _ = decode(ctx.config)
        given = {names[i]: a for i, a in zip(positions, arrays)}
        got = op.torch_backward(given, dict(zip(op.output_names, outs)), dict(zip(op.output_names, grads)),
                                scalars, dict(options))
        return tuple(got.get(names[i]) for i in positions) + (None,)
    return setup_context, backward


# --- the traced call ---------------------------------------------------------------------------
def plan(name, absent, scalars, options, device, compiler, tiles):
    """(overload, argument positions, per returned name: ('value', i) or ('result', j), config)
    of a call: constants, so dynamo evaluates it once (assume_constant_result) and traces none of it."""
    op = ops.get(ensure(name))
    names = op.array_names
    given = {n for n, a in zip(names, absent) if not a}
    mutating = any(n in given for n in op.output_names)
    positions = tuple(range(len(names))) if mutating else _registered[name]
    picks = []
    for n in op.returns_for(dict(options)):        # an updated array: the value passed (mutated by the op)
        picks.append(("result", op.output_names.index(n)) if n in op.output_names and n not in given
                     else ("value", names.index(n)))
    config = encode(op, scalars, options, device, compiler, tiles)
    return ("into" if mutating else "default", positions, tuple(picks), len(op.output_names) == 1, config)


def dispatch(op, values, scalars=(), options=(), device=None, compiler=None, tiles=None):
    """`launch.call` as a torch op: what dynamo traces instead of it, and what meta tensors run."""
    overload, positions, picks, single, config = _plan(op.name, tuple(v is None for v in values), tuple(scalars),
                                                       tuple(options), device, compiler, tiles or {})
    fn = getattr(getattr(torch.ops.hkjit, op.name), overload)
    result = fn(*[values[i] for i in positions], config)
    if single:
        result = (result,)
    out = tuple(values[i] if where == "value" else result[i] for where, i in picks)
    return out[0] if len(out) == 1 else out


_plan = plan
_dynamo_done: set = set()


def register_with_dynamo() -> None:
    """Make dynamo trace `dispatch` wherever a model calls `launch.call` (Python or native), and
    answer `launch.tracing()`; run once torch._dynamo is imported."""
    global _plan
    import torch._dynamo
    if _plan is plan:
        _plan = torch._dynamo.assume_constant_result(plan)
    launch.set_tracing(torch.compiler.is_compiling)
    _substitute(launch._python_call)
    if launch.call is not launch._python_call:
        _substitute(launch.call)
    if _substitute not in launch.call_listeners:
        launch.call_listeners.append(_substitute)


def _substitute(fn) -> None:
    if id(fn) in _dynamo_done:
        return
    from torch._dynamo.decorators import substitute_in_graph

    def traced_call(op, values, scalars=(), options=(), device=None, compiler=None, tiles=None):
        return dispatch(op, values, scalars, options, device, compiler, tiles)
    substitute_in_graph(fn, skip_signature_check=True)(traced_call)
    _dynamo_done.add(id(fn))
