"""Specialisation → compile → cache → load: the steps every op shares.

`build_spec` turns a Specialization into a code object (from memory, a bundle, the disk cache or
a fresh compile); `load_spec` also loads it on a device, rebuilding once if the cached image turns
out to be unloadable.
"""

import os
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from . import cache as cache_mod
from . import compiler as compiler_mod
from . import spec as spec_mod
from .spec import Specialization


@dataclass
class Built:
    """A compiled specialisation: what `hkjit.build` returns."""
    op: str
    target: str
    key: str
    code: bytes
    meta: dict
    params: dict = field(default_factory=dict)
    compiled: bool = False   # True when this call ran the compiler (False: memory, bundle or disk)

    def __repr__(self):
        return (f"Built(op={self.op!r}, target={self.target!r}, key={self.key[:16]}…, "
                f"{len(self.code)} bytes, compiled={self.compiled})")


_keys: dict = {}   # (spec, requested compiler) -> (key, compiler): skips re-hashing on repeat builds


def cache_key(spec: Specialization, compiler=None):
    memo = (spec, compiler, os.environ.get("HKJIT_COMPILER"))
    hit = _keys.get(memo)
    if hit is None:
        comp = compiler_mod.find_compiler(spec.target, compiler)
        flags = comp.flags(spec.target, [spec_mod.include_dir(), spec_mod.kernel_sources_dir()])
        hit = (cache_mod.make_key(spec_mod.key_parts(spec, comp.identity, flags)), comp)
        _keys[memo] = hit
    return hit


def _source_path(spec: Specialization, key: str, cache) -> Path:
    ext = ".cu" if spec.target.is_nvidia else ".hip"
    for root in (Path(cache.root) / "sources", Path(tempfile.gettempdir()) / "hkjit-sources"):
        try:
            root.mkdir(parents=True, exist_ok=True, mode=0o700)
            path = root / f"{spec.op}-{spec.target.arch}-{key[:16]}{ext}"
            path.write_text(spec_mod.render(spec))
            return path
        except OSError:
            continue
    raise OSError("no writable folder for generated sources (cache dir and temp dir both failed)")


def _compile(spec: Specialization, key: str, comp, cache):
    def build():
        path = _source_path(spec, key, cache)
        t0 = time.perf_counter()
        result = comp.compile(path.read_text(), path, spec.target,
                              [spec_mod.include_dir(), spec_mod.kernel_sources_dir()], spec.entry)
        meta = dict(result.meta)
        meta.update(op=spec.op, target=spec.target.id, entry=spec.entry, params=spec.param_dict,
                    compiler=comp.identity, compile_seconds=round(time.perf_counter() - t0, 3))
        return result.code, meta
    return build


def build_spec(spec: Specialization, compiler=None, cache=None) -> Built:
    cache = cache or cache_mod.default_cache()
    key, comp = cache_key(spec, compiler)
    entry, built = cache.get_or_build(key, _compile(spec, key, comp, cache),
                                      describe=lambda: _describe_miss(spec, key))
    return Built(spec.op, spec.target.id, key, entry.code, entry.meta, spec.param_dict, built)


def _describe_miss(spec: Specialization, key: str) -> str:
    params = " ".join(f"{k}={v}" for k, v in spec.params)
    return (f"{spec.describe()} (key {key}).\nTo ship it, add this line to the precompile manifest "
            f"and rebuild the bundle:\n  {spec.op} target={spec.target.id} {params}")


_loaded: dict = {}   # (key, device kind, device index) -> loaded kernel


def load_spec(spec: Specialization, device, dynamic_smem: int = 0, compiler=None):
    key, _ = cache_key(spec, compiler)
    slot = (key, device.kind, device.index)
    kernel = _loaded.get(slot)
    if kernel is not None:
        return kernel
    built = build_spec(spec, compiler)
    try:
        kernel = device.load(built.code, spec.entry, dynamic_smem)
    except Exception as e:
        if type(e).__name__ != "InvalidImageError" or built.compiled:
            raise
        # A cached image the runtime rejects is as corrupt as a bad checksum: set it aside, rebuild.
        cache_mod.default_cache().invalidate(key, f"runtime rejected the image: {e}")
        built = build_spec(spec, compiler)
        kernel = device.load(built.code, spec.entry, dynamic_smem)
    _loaded[slot] = kernel
    return kernel
