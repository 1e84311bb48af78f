"""Why a kernel compiled: the nearest cached key of the same op and the parts that differ.

A cache key is the hash of its key parts (hkjit/spec.py `key_parts`): the op's parameters (dtypes,
tile sizes, layouts, alignment classes), the hash of every header the kernel includes, the
generated unit, the compiler's identity and flags, the target and hkjit's version. A hash says only
"new"; this module says what made it new, by comparing the parts with those of every cached entry
of the same op (entries record their parts: jit.py writes them into the entry's metadata) and
naming the nearest one's differences:

    HKJIT_LOG=compile python train.py          # one block per compile, on stderr
    hkjit cache explain rms_norm --arch sm_90a rows=4096 hidden=8192 dtype=float16   # no compile

Parts are flat names: `target`, `compiler`, `flags`, `hkjit`, `source`, `unit`, `param <name>`,
`header <file>`. Entries written before their parts were recorded compare on what their metadata
has (params, compiler, flags, target, hkjit) and say so.
"""

from __future__ import annotations

import os
import sys

from . import cache as cache_mod
from . import spec as spec_mod

LOG_VAR = "HKJIT_LOG"
_SHORT = 12          # hex digits shown of a hash


def logging_compiles() -> bool:
    """HKJIT_LOG names `compile` (a comma-separated list; `all` names everything)."""
    wanted = {w.strip().lower() for w in os.environ.get(LOG_VAR, "").split(",")}
    return "compile" in wanted or "all" in wanted


def flat_parts(params: dict, files: dict | None, compiler, flags, target, version, source=None, unit=None) -> dict:
    """The comparable parts of one key (None where an old entry did not record them)."""
    parts = {"target": target, "compiler": compiler, "flags": " ".join(flags or []), "hkjit": version}
    if source is not None:
        parts["source"] = source
    if unit is not None:
        parts["unit"] = unit[:_SHORT]
    for name, value in (params or {}).items():
        parts[f"param {name}"] = value
    for name, digest in (files or {}).items():
        parts[f"header {name}"] = digest[:_SHORT]
    return parts


def parts_of_spec(spec, compiler_identity: str, flags) -> dict:
    kp = spec_mod.key_parts(spec, compiler_identity, list(flags))
    return flat_parts(dict(kp["params"]), kp["files"], kp["compiler"], kp["flags"], kp["target"], kp["hkjit"],
                      kp["source"], kp["unit"])


def recorded_parts(meta: dict) -> dict:
    """What jit.py adds to an entry's metadata so a later compile can be compared with it."""
    return {"files": meta.get("files"), "source": meta.get("source"), "unit": meta.get("unit")}


def parts_of_entry(info) -> tuple[dict, bool]:
    """(parts, complete) of a cached entry (an EntryInfo): complete when it recorded every part."""
    meta = info.meta
    complete = meta.get("files") is not None and meta.get("unit") is not None
    return flat_parts(meta.get("params") or {}, meta.get("files"), meta.get("compiler"), meta.get("flags"),
                      meta.get("target"), info.hkjit_version, meta.get("source"), meta.get("unit")), complete


def differences(old: dict, new: dict, complete: bool = True) -> list[tuple[str, object, object]]:
    """(part, old value, new value) for every part that differs (a part one side lacks: None),
    target, compiler and flags first, then headers, then parameters. The generated unit follows
    from the parameters: it is named only when nothing else differs (a changed kernel type, or a
    plan check)."""
    out = []
    for name in sorted(set(old) | set(new), key=_order):
        if not complete and name not in old and name.startswith(("header ", "source", "unit")):
            continue                                # the old entry did not record it: unknown, not different
        if name != "unit" and old.get(name) != new.get(name):
            out.append((name, old.get(name), new.get(name)))
    if not out and "unit" in old and old.get("unit") != new.get("unit"):
        out.append(("unit", old.get("unit"), new.get("unit")))
    return out


def _order(name):
    rank = {"target": 0, "compiler": 1, "flags": 2, "hkjit": 3, "source": 4, "unit": 9}
    return (rank.get(name, 5 if name.startswith("header") else 6), name)


def nearest(op: str, parts: dict, key: str | None = None, cache=None):
    """(key, differences, complete) of the cached entry of `op` whose parts differ least from
    `parts` (ties: the most recently used), or None when the cache holds no other entry of `op`."""
    cache = cache or cache_mod.default_cache()
    best = None
    for info in cache.entries():
        if info.problem or info.meta.get("op") != op or info.key == key:
            continue
        old, complete = parts_of_entry(info)
        diff = differences(old, parts, complete)
        rank = (len(diff), -info.last_used)
        if best is None or rank < best[0]:
            best = (rank, info.key, diff, complete)
    return None if best is None else best[1:]


def report(op: str, target: str, key: str, parts: dict, cache=None, verb="compiling") -> str:
    """The text of one explanation."""
    cache = cache or cache_mod.default_cache()
    lines = [f"hkjit: {verb} {op} for {target} (key {key[:16]})"]
    found = nearest(op, parts, key, cache)
    if found is None:
        lines.append(f"  no other {op} kernel is cached in {cache.root}: the first of this op here")
        return "\n".join(lines)
    other, diff, complete = found
    what = f"{len(diff)} part{'s' if len(diff) != 1 else ''} differ" + ("" if complete else
                                                                        " (it predates recorded headers)")
    lines.append(f"  nearest cached key {other[:16]}: {what}")
    for name, was, now in diff:
        lines.append(f"    {name}: {_show(was)} -> {_show(now)}")
    if not diff:
        lines.append("    no recorded part differs (the generated unit or hkjit's key format changed)")
    return "\n".join(lines)


def _show(value) -> str:
    return "(none)" if value is None or value == "" else str(value)


def log_compile(spec, key: str, compiler_identity: str, flags, cache=None) -> None:
    """With HKJIT_LOG=compile: say on stderr, before compiling `spec`, why its key is new."""
    if not logging_compiles():
        return
    try:
        text = report(spec.op, spec.target.id, key, parts_of_spec(spec, compiler_identity, flags), cache)
    except Exception as e:      # noqa: BLE001  (a log line must never stop a compile)
        text = f"hkjit: compiling {spec.op} for {spec.target.id} (key {key[:16]}); no explanation: {e}"
    print(text, file=sys.stderr, flush=True)


def explain_spec(spec, compiler=None, cache=None) -> str:
    """`hkjit cache explain`: what a call of `spec` would find, without compiling: its key is
    cached (nothing to compile), or what makes it new against the nearest cached key."""
    from . import compiler as compiler_mod
    from .errors import CompilerNotFoundError
    cache = cache or cache_mod.default_cache()
    try:
        comp = compiler_mod.find_compiler(spec.target, compiler)
        identity = comp.identity
        flags = [f for f in comp.flags(spec.target, [spec_mod.include_dir(), spec_mod.kernel_sources_dir()])
                 if not f.startswith("-I")]
    except CompilerNotFoundError as e:
        toolchains = cache.toolchains(spec.target.id)
        if not toolchains:
            raise CompilerNotFoundError(f"{e}; without a compiler (or a bundle's toolchain) the key cannot be "
                                        "named") from None
        identity, flags = toolchains[0]["compiler"], toolchains[0].get("flags") or []
    key = cache_mod.make_key(spec_mod.key_parts(spec, identity, flags))
    if cache.get(key) is not None:
        return f"hkjit: {spec.op} for {spec.target.id} is cached (key {key[:16]}): nothing would compile"
    return report(spec.op, spec.target.id, key, parts_of_spec(spec, identity, flags), cache, verb="would compile")
