"""hkjit inside other frameworks' compilers: torch.compile, CUDA graphs, jax.jit.

    install()        # once, from the package face (`hkjit.<op>`): imports neither torch nor JAX

What `install` sets up, without importing a framework:
- the launch path's symbolic route (`launch.set_symbolic_route`): a call whose arrays have no
  memory here (torch meta or fake tensors, FunctionalTensors of a trace, JAX tracers) goes to the
  framework's own op: `torch.ops.hkjit.<op>` (hkjit/frameworks/torch_ops.py, registered per op on
  first use, fake implementation from the op's `bind`) or an XLA FFI call (jax_ffi.py);
- once torch._dynamo is imported (now, or when torch.compile first imports it), torch_ops
  registers with dynamo a traceable stand-in for `launch.call` (both its Python function and the
  native path's C function), so `torch.compile(fullgraph=True)` sees `torch.ops.hkjit.<op>`
  where the model calls `hkjit.<op>`, and `launch.tracing()` answers torch.compiler.is_compiling.

Eager calls with real arrays never reach this package (the repeat paths are untouched).
"""

from __future__ import annotations

import importlib.machinery
import sys
import warnings

from .. import launch

_installed = False


def install() -> None:
    global _installed
    if _installed:
        return
    _installed = True
    launch.set_symbolic_route(route, is_symbolic)
    after_import("torch._dynamo", _dynamo_loaded)


def is_symbolic(value) -> bool:
    """Whether `value` is an array with no memory here: a torch meta tensor, a FakeTensor or
    FunctionalTensor (what torch.compile traces with), or a JAX tracer (inside jax.jit)."""
    module = type(value).__module__
    if module.startswith("torch"):
        torch = sys.modules["torch"]
        if not isinstance(value, torch.Tensor):
            return False
        return value.is_meta or type(value).__name__ in ("FakeTensor", "FunctionalTensor")
    if module.startswith("jax"):
        tracer = jax_tracer_type()
        return tracer is not None and isinstance(value, tracer)
    return False


def jax_tracer_type():
    """jax's Tracer class (jax.core.Tracer; jax._src.core where a release stopped exporting it)."""
    jax = sys.modules.get("jax")
    tracer = getattr(getattr(jax, "core", None), "Tracer", None)
    if tracer is None and jax is not None:
        tracer = getattr(sys.modules.get("jax._src.core"), "Tracer", None)
    return tracer


def route(op, values, scalars=(), options=(), device=None, compiler=None, tiles=None):
    """The launch path's symbolic route: the framework's op for arrays without memory, else
    NotImplemented (the launch path goes on)."""
    for v in values:
        if v is not None and is_symbolic(v):
            if type(v).__module__.startswith("jax"):
                from . import jax_ffi
                return jax_ffi.call(op, values, scalars, options, device, compiler, tiles)
            from . import torch_ops
            return torch_ops.dispatch(op, values, scalars, options, device, compiler, tiles)
    return NotImplemented


def _dynamo_loaded() -> None:
    from . import torch_ops
    torch_ops.register_with_dynamo()


# --- running code right after a module is imported -----------------------------------------------
class _AfterImport:
    """A sys.meta_path finder (a plain class: importlib.abc would import importlib.resources and
    tempfile on every start). Finds `name` with the other finders and wraps its loader so `callback` runs right after the
    module's own code (then leaves sys.meta_path). Only that one name is ever looked at."""

    def __init__(self, name, callback):
        self.name, self.callback, self.busy = name, callback, False

    def find_spec(self, fullname, path=None, target=None):
        if fullname != self.name or self.busy:
            return None
        self.busy = True
        try:
            spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        finally:
            self.busy = False
        loader = getattr(spec, "loader", None)
        if loader is None or not hasattr(loader, "exec_module"):
            return None
        run = loader.exec_module

        def exec_module(module):
            run(module)
            if self in sys.meta_path:
                sys.meta_path.remove(self)
            _call_safely(self.callback)
        loader.exec_module = exec_module
        return spec


def _call_safely(callback) -> None:
    try:
        callback()
    except Exception as e:      # noqa: BLE001  (never break the framework's own import)
        warnings.warn(f"hkjit: could not register its ops with the framework just imported ({e!r}); "
                      "torch.compile will break its graph at hkjit calls", RuntimeWarning, stacklevel=3)


def after_import(name: str, callback) -> None:
    """Run `callback()` once `name` is imported: now if it is, else right after its import."""
    if name in sys.modules:
        _call_safely(callback)
    elif not any(isinstance(f, _AfterImport) and f.name == name for f in sys.meta_path):
        sys.meta_path.insert(0, _AfterImport(name, callback))
