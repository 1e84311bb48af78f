"""The op protocol: what an op module declares and what it hands the shared launch path.

An op is one kernel source plus one short module. The module declares its parameters once
(`Param`: compile-time values with their checks, the shape names manifests may write positionally),
and implements two methods:

    op.plan(target, **params) -> Plan        # specialisation, threads, smem, grid, args, workspace
    op.bind(arrays, options, device) -> Binding   # a call's arrays -> build keywords, outputs, args

`plan` serves `hkjit.build`, `hkjit inspect`, manifests and precompile (no arrays, no GPU);
`bind` serves a call: `hkjit.launch.call` describes the arrays, picks the device, stages host
memory, memoises launchers, allocates outputs, workspaces and scratch, records manifests and keeps the torch
repeat-call path, so none of that is written per op. Per-arch modules of an op implement one
interface: `configure(target, params, tiles) -> Config` and `fill(config, ...)`.
"""

from __future__ import annotations

import ctypes
import math
from typing import Any, Callable

from .dtypes import DType, dtype as to_dtype
from .errors import DTypeError, InvalidArgumentError
from .spec import Specialization
from .targets import Target, parse as parse_target
from .values import Frozen, Mutable

_MISSING = object()


class Param(Frozen):
    """One compile-time parameter of an op (a keyword of `hkjit.build`): its `kind` ("size",
    "dtype", "choice", "bool", "int"), `default` (none given: required), `choices` (dtype names or
    allowed values) and `doc`."""
    __slots__ = ("name", "kind", "default", "choices", "doc")

    def __init__(self, name: str, kind: str, default: Any = _MISSING, choices: tuple = (), doc: str = ""):
        self._set(name=name, kind=kind, default=default, choices=choices, doc=doc)

    @property
    def required(self) -> bool:
        return self.default is _MISSING

    def check(self, op: str, value):
        if self.kind == "size":
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value < 2 ** 31:
                raise InvalidArgumentError(f"{op}: {self.name}={value!r}; sizes must be ints from 1 to 2**31-1")
            return value
        if self.kind == "dtype":
            if value is None:
                return None
            name = to_dtype(value).name
            if self.choices and name not in self.choices:
                raise DTypeError(f"{op}: {self.name}={name}; it must be one of {', '.join(self.choices)}")
            return name
        if self.kind == "bool":
            if not isinstance(value, (bool, int)) or value not in (0, 1):
                raise InvalidArgumentError(f"{op}: {self.name}={value!r}; give True or False")
            return bool(value)
        if self.kind == "int":
            if value is None and self.default is None:
                return None
            if isinstance(value, bool) or not hasattr(value, "__index__"):
                raise InvalidArgumentError(f"{op}: {self.name}={value!r} is not an int")
            value = int(value)                                  # NumPy ints as Python's
            if not 0 <= value < 2 ** 31:
                raise InvalidArgumentError(f"{op}: {self.name}={value}; give an int from 0 to 2**31-1")
        if self.choices and value not in self.choices:
            raise InvalidArgumentError(f"{op}: {self.name}={value!r}; valid: {', '.join(map(str, self.choices))}")
        return value


class Config(dict):
    """A validated tile configuration: names to ints, bools and dtype names. The same type for
    every arch module of every op; `hkjit inspect` prints it and the specialisation is built from it."""

    def key(self) -> tuple:
        return tuple(sorted(self.items()))


_INT_CODES = {"b": True, "h": True, "i": True, "l": True, "q": True,
              "B": False, "H": False, "I": False, "L": False, "Q": False, "P": False}


def _field_range(ctype) -> tuple | None:
    """(lowest, highest) an integer ctypes field holds, or None for a field that is not an integer."""
    code = getattr(ctype, "_type_", None)
    if not isinstance(code, str) or code not in _INT_CODES:
        return None
    bits = 8 * ctypes.sizeof(ctype)
    return (-2 ** (bits - 1), 2 ** (bits - 1) - 1) if _INT_CODES[code] else (0, 2 ** bits - 1)


class _FieldRangeError(InvalidArgumentError):
    """A value does not fit the C type of an argument-struct field (the op's name is added by Plan)."""


_FLOAT32_MAX = 3.4028234663852886e38


def _checked_value(name, value, rng):
    """`value` as the field `name` (range `rng`: (lo, hi) or "float32") stores it, or
    _FieldRangeError: ctypes itself truncates silently, so an extent >= 2**31 written to a C int
    would reach the kernel wrapped, and 1e300 written to a C float would become inf."""
    if rng == "float32":
        if isinstance(value, bool) or not isinstance(value, (int, float)) or (
                math.isfinite(value) and abs(value) > _FLOAT32_MAX):
            raise _FieldRangeError(f"argument {name}={value!r} is not a number a C float holds")
        return value
    lo, hi = rng
    if value is None and lo == 0:
        return 0                                        # a null pointer
    if isinstance(value, bool) or not hasattr(value, "__index__"):
        raise _FieldRangeError(f"argument {name}={value!r} is not an integer")
    if not lo <= int(value) <= hi:
        raise _FieldRangeError(f"argument {name}={int(value)} does not fit its C type "
                               f"(from {lo} to {hi}); the kernel would see a wrapped value")
    return int(value)


def _checked_setattr(self, name, value):
    rng = self._hkjit_ranges_.get(name)
    if rng is not None:
        value = _checked_value(name, value, rng)
    ctypes.Structure.__setattr__(self, name, value)


def _checked_init(struct_type, ranges):
    """A generated __init__ taking the fields positionally or by name, as ctypes' own does, that
    checks each value with one type test and one chained comparison in the common case (an exact
    int or float in range; anything else goes through `_checked_value`) and stores it through the
    field's descriptor, bypassing the checked __setattr__. About 4x cheaper than per-field
    __setattr__ checks (a packed-argument miss of rms_norm: 7.5 -> under 2 us). None where the
    field names cannot be parameters (ctypes' own __init__ and the checked __setattr__ then)."""
    import keyword
    names = [f[0] for f in struct_type._fields_]
    if any(not n.isidentifier() or keyword.iskeyword(n) or n in ("self", "_M", "_v", "_set") for n in names):
        return None
    env = {"_M": _MISSING, "_v": _checked_value, "_set": {}}
    lines = [f"def __init__(self, {', '.join(f'{n}=_M' for n in names)}):"]
    for n in names:
        env["_set"][n] = struct_type.__dict__[n].__set__
        env[f"_s_{n}"] = env["_set"][n]
        rng = ranges.get(n)
        lines.append(f"    if {n} is not _M:")
        if rng == "float32":
            lines.append(f"        if {n}.__class__ is not float or not {-_FLOAT32_MAX!r} <= {n} <= {_FLOAT32_MAX!r}: "
                         f"{n} = _v({n!r}, {n}, 'float32')")
        elif rng is not None:
            lines.append(f"        if {n}.__class__ is not int or not {rng[0]} <= {n} <= {rng[1]}: "
                         f"{n} = _v({n!r}, {n}, {rng!r})")
        lines.append(f"        _s_{n}(self, {n})")
    if len(lines) == 1:
        lines.append("    pass")
    exec("\n".join(lines), env)
    return env["__init__"]


def _check_struct_ranges(struct_type) -> None:
    """Make every integer and float field of `struct_type` (and of the structures nested in it, also
    inside arrays) refuse a value outside its C type's range, at construction (a generated
    __init__) and on assignment (__setattr__). Installed once per type by `Plan`, so no op has to
    remember it."""
    if "_hkjit_ranges_" in struct_type.__dict__:
        return
    ranges = {}
    for field in struct_type._fields_:
        name, ctype = field[0], field[1]
        while hasattr(ctype, "_length_") and hasattr(ctype, "_type_") and isinstance(ctype._type_, type):
            ctype = ctype._type_                        # arrays: check their element type
        if isinstance(ctype, type) and issubclass(ctype, ctypes.Structure):
            _check_struct_ranges(ctype)
        elif len(field) == 2 and (rng := _field_range(ctype)) is not None:
            ranges[name] = rng                          # bit fields (3-tuples) are left to ctypes
        elif getattr(ctype, "_type_", None) == "f":
            ranges[name] = "float32"                    # ctypes rounds 1e300 to inf silently
    struct_type._hkjit_ranges_ = ranges
    init = _deferred_init(struct_type, ranges)
    if init is not None:
        struct_type.__init__ = init
    struct_type.__setattr__ = _checked_setattr


def _deferred_init(struct_type, ranges):
    """The checked __init__ of `struct_type` (None where _checked_init makes none): the first
    construction checks each value with `_checked_value`, in field order, as the generated one does
    (same values stored, same errors), and the second installs and runs the generated one.
    Compiling that costs about 1 ms, most of a plan, while a process's first call of a signature
    fills its struct once; calls that fill again (new pointers, new scalars) pay it then."""
    import keyword
    names = [f[0] for f in struct_type._fields_]
    if any(not n.isidentifier() or keyword.iskeyword(n) or n in ("self", "_M", "_v", "_set") for n in names):
        return None
    setters = {n: struct_type.__dict__[n].__set__ for n in names}
    made = []

    def __init__(self, *args, **kwargs):
        if made:
            init = struct_type.__init__ = _checked_init(struct_type, ranges)
            return init(self, *args, **kwargs)
        if len(args) > len(names):
            raise TypeError(f"{struct_type.__name__}() takes at most {len(names)} arguments ({len(args)} given)")
        given = dict(zip(names, args))
        for n, v in kwargs.items():
            if n not in setters:
                raise TypeError(f"{struct_type.__name__}() got an unexpected keyword argument {n!r}")
            if n in given:
                raise TypeError(f"{struct_type.__name__}() got multiple values for argument {n!r}")
            given[n] = v
        for n in names:
            if n in given:
                rng = ranges.get(n)
                setters[n](self, given[n] if rng is None else _checked_value(n, given[n], rng))
        made.append(True)
    return __init__


class Plan(Frozen):
    """Everything the launch path needs for one specialisation on one target: the `spec`, its
    `config`, `threads`, `dynamic_smem` and `grid`, `args_type` (the ctypes.Structure mirroring the
    kernel's args) and `fill(**kernel arguments)` giving one, and the device memory its launches
    need beyond the call's arrays (`fill` gets both pointers, `workspace` and `scratch`, 0 where
    none):

    - `workspace_bytes` (0: none), kept per stream for the launcher's life, of which the leading
      `workspace_zeroed` bytes start at zero and every launch must leave at zero (semaphores,
      counters). Held between calls, so it should stay small;
    - `scratch_bytes` (0: none), whose contents a launch neither needs nor leaves for the next:
      the launch path gives each call some (torch callers: from torch's caching allocator, on the
      launch stream; others: a buffer shared by the launches on that stream), so a signature holds
      none of it between calls (docs/notes/frameworks.md, "Workspace and scratch").

    Every integer written into `args_type` is checked against its field's C type (see
    `_check_struct_ranges`); `fill` raises InvalidArgumentError naming the op and the field."""
    __slots__ = ("spec", "config", "threads", "dynamic_smem", "grid", "args_type", "fill", "workspace_bytes",
                 "workspace_zeroed", "scratch_bytes")

    def __init__(self, spec: Specialization, config: Config, threads: int, dynamic_smem: int, grid: tuple,
                 args_type: type, fill: Callable[..., ctypes.Structure], workspace_bytes: int = 0,
                 workspace_zeroed: int = 0, scratch_bytes: int = 0):
        _check_struct_ranges(args_type)
        op = spec.op
        if not 0 <= workspace_zeroed <= workspace_bytes or scratch_bytes < 0:
            raise InvalidArgumentError(f"{op}: workspace {workspace_bytes} B of which {workspace_zeroed} zeroed, "
                                       f"scratch {scratch_bytes} B: the op's plan is inconsistent")

        def checked_fill(**arguments):
            try:
                return fill(**arguments)
            except _FieldRangeError as e:
                raise InvalidArgumentError(f"{op}: {e}") from None
        self._set(spec=spec, config=config, threads=threads, dynamic_smem=dynamic_smem, grid=grid,
                  args_type=args_type, fill=checked_fill, workspace_bytes=workspace_bytes,
                  workspace_zeroed=workspace_zeroed, scratch_bytes=scratch_bytes)


class Binding(Mutable):
    """One call signature (dtypes, shapes, strides, alignment classes) bound to an op.

    `request` are the `hkjit.build` keywords that give the kernel; `outputs` the arrays to allocate
    when the caller passed none (name -> (shape, DType)); `args(ptrs, scalars)` returns the keyword
    arguments of `Plan.fill` from the call's pointers (name -> int, 0 for absent arrays, plus
    'workspace' and 'scratch') and run-time scalars; `returns` names what the call gives back; `aligned_copies`
    the arrays the kernel cannot read in place (re-laid out first); `updates` the arrays the call
    passes that are not among the op's outputs but that this target's kernel writes as well (the
    sm_90a dK/dV kernel of the attention backward writes dq): a call on host arrays copies them back
    as it does the outputs. They must be among the op's `updated_names` (what compilers are told,
    for every target); the launch path refuses a binding that says otherwise."""
    __slots__ = ("request", "outputs", "args", "returns", "aligned_copies", "updates")

    def __init__(self, request: dict, outputs: dict, args: Callable[[dict, tuple], dict],
                 returns: tuple = ("out",), aligned_copies: tuple = (), updates: tuple = ()):
        self.request, self.outputs, self.args = request, outputs, args
        self.returns, self.aligned_copies, self.updates = returns, aligned_copies, updates


class Op:
    """Base of every op. Subclasses set `name`, `params`, `shape_params`, `default_shape`, the
    names of the call's arrays, outputs and run-time scalars, and implement
    `plan_for(target, params, tiles)` and `bind(arrays, options, device)`."""
    name: str = ""
    array_names: tuple = ()            # the arrays a call passes, in order (absent ones are None)
    output_names: tuple = ()           # those the kernel writes (allocated when not passed)
    inplace_names: tuple = ()          # outputs the caller must pass: updated in place, never allocated
    updated_names: tuple = ()          # arrays a call passes, not outputs, that it may write (on some target):
                                       # declared to compilers (torch schemas mark them mutated, jax.jit aliases
                                       # them to a result) and returned after the outputs; `Binding.updates`
                                       # says which this target's kernel writes
    scalar_names: tuple = ()           # run-time scalars (kernel arguments, not specialised on)
    params: tuple = ()                 # Param declarations (compile-time)
    shape_params: tuple = ()           # names of the shape params, in manifest order
    default_shape: dict = {}           # what `hkjit inspect` and cold-compile figures use
    tile_keywords: tuple = ()          # union over targets; each arch module rejects what it lacks
    stages_transposed: bool = False    # host staging keeps a column-major 2-D array so (else row-major)

    def plan(self, target, **params) -> Plan:
        target = target if isinstance(target, Target) else parse_target(target)
        values, tiles = self.check_params(params)
        return self.plan_for(target, values, tiles)

    def check_params(self, params: dict) -> tuple[dict, dict]:
        """(validated params with defaults, tile overrides); unknown keywords raise."""
        known = {p.name: p for p in self.params}
        extra = set(params) - set(known)     # tile overrides (tile_keywords may import an arch module)
        unknown = sorted(extra - set(self.tile_keywords)) if extra else []
        if unknown:
            raise InvalidArgumentError(
                f"{self.name}: unknown keyword(s) {', '.join(unknown)}; parameters are "
                f"{', '.join(known)}; tile overrides are {', '.join(self.tile_keywords) or 'none'}")
        values = {}
        for p in self.params:
            if p.name in params:
                values[p.name] = p.check(self.name, params[p.name])
            elif p.required:
                raise InvalidArgumentError(f"{self.name}: missing {p.name}= ({p.doc or p.kind})")
            else:
                values[p.name] = p.default
        tiles = {k: v for k, v in params.items() if k in extra}
        for k, v in tiles.items():
            # Every tile value ends up in a C++ template argument or an int field: refuse what no
            # C int holds here, so clang never has to (each arch module narrows the range further).
            if isinstance(v, int) and not isinstance(v, bool) and not 0 <= v < 2 ** 31:
                raise InvalidArgumentError(f"{self.name}: tile override {k}={v}; tile overrides are ints "
                                           "from 0 to 2**31-1 (each target accepts a narrower range)")
        return values, tiles

    def plan_for(self, target: Target, params: dict, tiles: dict) -> Plan:
        raise NotImplementedError

    def bind(self, arrays: dict, options: dict, device) -> Binding:
        """Validate every array and option first, then look at `device` (its target and
        multiprocessors); `device` is None when the call is only being checked (no device could be
        chosen): return None after validating."""
        raise NotImplementedError

    def static_figures(self, plan: Plan, report: dict) -> None:
        """Op-specific lines for `hkjit inspect` (e.g. MFMAs per K-step against the tile arithmetic)."""

    def returns_for(self, options: dict) -> tuple:
        """The names a call returns, in order, whatever it passed (`Binding.returns`, said before any
        array is seen: hkjit/frameworks builds torch.library schemas and traced calls from it).
        Default: every output, then every updated array (as passed: a traced call gets its new
        value, which is how jax.jit hands on an aliased result). tests/test_frameworks_torch.py
        checks it against bind."""
        return self.output_names + self.updated_names

    # An op whose calls torch autograd may differentiate under torch.compile defines
    #     torch_backward(inputs, outputs, grads, scalars, options) -> {input name: gradient}
    # (dicts by array name; hkjit/frameworks registers it with torch.library.register_autograd).


def check_tiles(where: str, tiles: dict, accepted: tuple) -> None:
    """Per-arch rejection of tile keywords the arch does not take, and of non-int values."""
    unknown = sorted(set(tiles) - set(accepted))
    if unknown:
        raise InvalidArgumentError(f"{where}: unknown tile override(s) {', '.join(unknown)}; valid: "
                                   f"{', '.join(accepted)}")


def dtype_of(op: str, what: str, dt: DType, allowed: tuple) -> str:
    if dt.name not in allowed:
        raise DTypeError(f"{op}: {what} has dtype {dt.name}; it must be one of {', '.join(allowed)}")
    return dt.name
