"""The op registry. Every public module of this package defines one op and registers it on import;
`hkjit.build`, `hkjit inspect`, manifests, `hkjit precompile` and `hkjit bench` ask the registry
and name no op. Modules whose names start with `_` are an op's per-arch halves."""

import importlib

from ..errors import InvalidArgumentError

_OPS: dict = {}
_discovered = False


def register(op):
    _OPS[op.name] = op
    return op


def _discover():
    global _discovered
    if not _discovered:
        import pkgutil   # here: a call imports its own op's module and never lists the others
        for info in pkgutil.iter_modules(__path__):
            if not info.name.startswith("_"):
                importlib.import_module(f"{__name__}.{info.name}")
        _discovered = True


def get(name):
    """The registered op called `name`."""
    if not isinstance(name, str):
        raise InvalidArgumentError(f"op must be a name such as 'gemm', got {name!r}")
    if name not in _OPS:
        _discover()
    try:
        return _OPS[name]
    except KeyError:
        raise InvalidArgumentError(f"unknown op {name!r}; hkjit has {', '.join(names())}") from None


def names() -> list:
    _discover()
    return sorted(_OPS)


def shape_params(name) -> tuple:
    """The op's shape parameter names in order (what a manifest's `shapes = [[...]]` lists)."""
    return get(name).shape_params
