"""Public entry points that are not ops: building without running, offline mode."""

from . import jit, ops, targets
from .jit import Built


def build(op: str, *, target: str, compiler: str | None = None, **params) -> Built:
    """Specialise and compile `op` for `target` (or fetch it from the cache); needs no GPU.

    >>> b = hkjit.build("gemm", target="gfx950", m=8192, n=8192, k=8192, dtype="bfloat16")
    >>> b.key, len(b.code), b.meta["vgprs"]
    """
    spec, _plan = ops.get(op).specialize(targets.parse(target), **params)
    built = jit.build_spec(spec, compiler, request=params)
    from . import deploy
    deploy.record(op, spec.target.id, params)
    return built


def set_offline(flag: bool = True) -> None:
    """Never compile: a specialisation missing from every bundle and the cache raises
    OfflineMissError naming it (same as HKJIT_OFFLINE=1)."""
    from . import cache
    cache.set_offline(flag)
