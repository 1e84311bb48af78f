"""Public entry points that are not ops: building without running, the static report, offline
mode, resetting in-process state. Every op is reached through the registry (hkjit.ops).
Modules only these entry points need are imported when first used: `import hkjit` stays cheap."""

from . import cache, jit, launch, ops, targets
from .jit import Built


def build(op: str, *, target: str, compiler: str | None = None, **params) -> Built:
    """Specialise and compile `op` for `target` (or fetch it from the cache); needs no GPU.

    >>> b = hkjit.build("gemm", target="gfx950", m=8192, n=8192, k=8192, dtype="bfloat16")
    >>> b.key, len(b.code), b.meta["vgprs"]
    """
    from . import deploy
    target_id = targets.parse(target).id
    plan = ops.get(op).plan(target_id, **params)
    deploy.record(op, target_id, params)
    return jit.build_spec(plan.spec, compiler, miss_hint=launch.miss_hint(op, target_id, params))


def inspect(op: str, arch: str, **params) -> dict | list:
    """The static report of `op` on each target in `arch` (comma-separated): registers, LDS/shared
    memory, spills, occupancy, instruction mix, plus the op's own figures. Shape parameters the
    caller leaves out take the op's default shape."""
    from . import static
    if "," in arch:
        return [inspect(op, a, **params) for a in arch.split(",")]
    the_op = ops.get(op)
    target = targets.parse(arch)
    params = {**the_op.default_shape, **params}
    plan = the_op.plan(target, **params)
    built = build(op, target=target.id, **params)
    report = static.report(built, plan.config, plan.threads)
    the_op.static_figures(plan, report)
    return report


def set_offline(flag: bool = True) -> None:
    """Never compile: a specialisation missing from every bundle and the cache raises
    OfflineMissError naming it (same as HKJIT_OFFLINE=1)."""
    cache.set_offline(flag)


def reset_state() -> None:
    """Forget everything this process memoised: launchers, repeat-call entries, keys, loaded
    kernels and the default cache object (the files on disk stay). For tests and for programs that
    change HKJIT_* settings at run time."""
    from . import compiler
    launch.reset()
    jit.reset()
    compiler.forget()
    cache.reset_default_cache()
