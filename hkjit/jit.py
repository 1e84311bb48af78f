"""Specialisation → compile → cache → load: the steps every op shares.

`build_spec` turns a Specialization into a code object (from memory, a bundle, the disk cache or
a fresh compile); `load_spec` also loads it on a device, rebuilding once if the cached image turns
out to be unloadable.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import time
import warnings
from pathlib import Path

from . import cache as cache_mod
from . import explain as explain_mod
from . import spec as spec_mod
from .cache import index as index_mod
from .errors import CacheWarning, CompilerNotFoundError, HKJitError, InvalidImageError, OfflineMissError
from .spec import Specialization
from .values import Mutable


class Built(Mutable):
    """A compiled specialisation: what `hkjit.build` returns. `compiled` is True when this call ran
    the compiler (False: memory, bundle or disk)."""
    __slots__ = ("op", "target", "key", "code", "meta", "params", "compiled")

    def __init__(self, op: str, target: str, key: str, code: bytes, meta: dict, params: dict | None = None,
                 compiled: bool = False):
        self.op, self.target, self.key, self.code, self.meta = op, target, key, code, meta
        self.params, self.compiled = ({} if params is None else params), compiled

    def __repr__(self):
        return (f"Built(op={self.op!r}, target={self.target!r}, key={self.key[:16]}…, "
                f"{len(self.code)} bytes, compiled={self.compiled})")


_keys: dict = {}   # (spec, requested compiler, env) -> key: repeat builds skip all hashing


def _include_dirs():
    return [spec_mod.include_dir(), spec_mod.kernel_sources_dir()]


def _index_id(spec: Specialization, compiler) -> str:
    """Names the key-index record of `spec`: the generated unit, where its headers are read from,
    and what steers compiler selection. Header contents are not hashed here: the record carries a
    stamp of the header files (spec.Closure), so a warm start reads no header."""
    env = {v: os.environ.get(v) for v in ("HKJIT_COMPILER", "HKJIT_CLANG", "PATH")}
    text = json.dumps({"unit": spec_mod.render(spec), "requested": compiler, "env": env, "target": spec.target.id,
                       "roots": [str(d) for d in _include_dirs()]}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()


def cache_key(spec: Specialization, compiler=None, miss_hint=None) -> str:
    """The cache key of `spec`: a hash of the unit, every header it includes (their contents), the
    compiler's identity and flags. Asking a compiler who it is can cost more than the rest of a
    warm start (importing NVRTC alone: ~60 ms), and hashing the headers costs milliseconds, so the
    key found last time is kept in an index beside the cache and reused while the compiler's files
    and the header files are unchanged (see _index_lookup). With no compiler at all (a
    deployment), the toolchains recorded in the bundles give the keys of the kernels they hold."""
    memo = (spec, compiler, os.environ.get("HKJIT_COMPILER"))
    key = _keys.get(memo)
    if key is not None:
        return key
    cache = cache_mod.default_cache()
    index_id = _index_id(spec, compiler)
    key = _index_lookup(cache, index_id, spec)
    if key is None:
        from . import compiler as compiler_mod   # here: a warm start finds its key in the index
        closure = spec_mod.closure(spec.source)
        try:
            comp = compiler_mod.find_compiler(spec.target, compiler)
        except CompilerNotFoundError:
            key = _key_from_bundles(cache, spec)
            if key is None and cache.offline:
                key = _offline_key(cache, spec, miss_hint)
            if key is None:
                raise
        else:
            flags = comp.flags(spec.target, _include_dirs())
            key = cache_mod.make_key(spec_mod.key_parts(spec, comp.identity, flags, closure.files))
            _index_store(cache, index_id, key, comp.fingerprint(), spec, closure)
    _keys[memo] = key
    return key


def _offline_key(cache, spec, miss_hint):
    """Offline with no compiler and no bundle holding `spec`: the key under the bundles' first
    toolchain (so the cache reports the miss with its key and manifest line), else the miss itself."""
    tcs = cache.toolchains(spec.target.id)
    if tcs:
        return cache_mod.make_key(spec_mod.key_parts(spec, tcs[0]["compiler"], tcs[0].get("flags") or []))
    raise OfflineMissError("offline mode is on and no bundle holds " + _describe_miss(spec, None, miss_hint))


def _key_from_bundles(cache, spec):
    for tc in cache.toolchains(spec.target.id):
        key = cache_mod.make_key(spec_mod.key_parts(spec, tc["compiler"], tc.get("flags") or []))
        if cache.get(key) is not None:
            return key
    return None


def _expectation(spec: Specialization) -> dict:
    """What an entry compiled for `spec` says it is (its metadata; JSON round-tripped)."""
    return {"op": spec.op, "target": spec.target.id, "entry": spec.entry,
            "params": json.loads(json.dumps(spec.param_dict))}


_warned_records: set = set()


def _index_lookup(cache, index_id, spec):
    """The key recorded for `index_id`, or None. Trusted only when the record is whole (checksum),
    the compiler's files are unchanged, the headers are (their stamp holds; else they are hashed
    and must hash as they did), and the entry the record names exists and is this specialisation:
    a record edited to name another valid key is a miss, never the other kernel."""
    path = index_mod.record_path(cache.root, index_id)
    try:
        record = index_mod.read_record(path)
        if record is None:
            return None
        for file, mtime_ns, size in record["fingerprint"]:
            st = os.stat(file)
            if (st.st_mtime_ns, st.st_size) != (mtime_ns, size):
                return None
        key = cache_mod.check_key(record["key"])
        expect = _expectation(spec)
        if record["expect"] != expect:
            return None
        closure = None
        if not (record["stamp"] and spec_mod.stamp_holds(record["stamp"])):
            closure = spec_mod.closure(spec.source)       # touched, copied or edited: hash them
            if closure.digest() != record["closure"]:
                return None
    except index_mod.CorruptRecordError as e:
        if path not in _warned_records:
            _warned_records.add(path)
            warnings.warn(f"hkjit: key index record {path} is bad ({e}); ignoring it and computing the key "
                          "again", CacheWarning, stacklevel=4)
        return None
    except (OSError, ValueError, KeyError, TypeError, HKJitError):
        return None
    entry = cache.get(key)
    if entry is None or index_mod.expectation_problem(expect, entry.meta):
        return None
    if closure is not None and closure.settled():
        _index_store(cache, index_id, key, record["fingerprint"], spec, closure)   # a fresh stamp
    return key


def _index_store(cache, index_id, key, fingerprint, spec, closure):
    if not fingerprint:
        return  # a compiler whose files cannot be identified is asked every time
    # A stamp of files changed in the last seconds is not kept (spec.SETTLE_NS): the next process
    # hashes them and records the stamp once they have settled.
    stamp = closure.stamp if closure.settled() else []
    try:
        index_mod.write_record(cache.root, index_id, key, fingerprint, _expectation(spec), cache.mkdirs,
                               closure=closure.digest(), stamp=stamp)
    except OSError:
        pass  # read-only or full cache: the index is only a shortcut (write_record left no temp file)


def _write_source(spec: Specialization, key: str, cache) -> tuple[str, Path, Path | None]:
    """(text, path, private folder or None) of the generated unit, written where the compiler and a
    user reading a CompileError can find it: the cache's own sources/ (0700), else a fresh private
    temporary folder (mkdtemp: 0700 and unpredictable, so no other user can plant a link or swap
    the file). Never through a link; the compiler gets the text itself, not a re-read."""
    text = spec_mod.render(spec)
    name = f"{spec.op}-{spec.target.arch}-{key[:16]}{'.cu' if spec.target.is_nvidia else '.hip'}"
    try:
        root = cache.mkdirs("sources")   # every level it creates 0700
        _write_no_follow(root / name, text)
        return text, root / name, None
    except OSError:
        import tempfile
        private = Path(tempfile.mkdtemp(prefix="hkjit-src-"))
        _write_no_follow(private / name, text)
        return text, private / name, private


def _write_no_follow(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0), 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)


def _compile(spec: Specialization, key: str, compiler, cache):
    def build():
        from . import compiler as compiler_mod, pch as pch_mod   # compiles only: a warm start needs neither
        comp = compiler_mod.find_compiler(spec.target, compiler)
        flags = [f for f in comp.flags(spec.target, _include_dirs()) if not f.startswith("-I")]
        explain_mod.log_compile(spec, key, comp.identity, flags, cache)    # HKJIT_LOG=compile: why it is new
        text, path, private = _write_source(spec, key, cache)
        t0 = time.perf_counter()
        result = pch_mod.compile_unit(comp, text, path, spec, _include_dirs(), cache)
        if private is not None:   # kept only when the compile fails: its error names the file
            shutil.rmtree(private, ignore_errors=True)
        meta = dict(result.meta)
        parts = spec_mod.key_parts(spec, comp.identity, flags)     # recorded for `hkjit cache explain`
        meta.update(files=parts["files"], source=spec.source, unit=parts["unit"])
        meta.update(op=spec.op, target=spec.target.id, entry=spec.entry, params=spec.param_dict,
                    compiler=comp.identity, flags=flags, compile_seconds=round(time.perf_counter() - t0, 3),
                    pch=result.pch)
        return result.code, meta
    return build


def build_spec(spec: Specialization, compiler=None, cache=None, miss_hint=None) -> Built:
    """`miss_hint`: a callable giving text for an offline miss (how to ship the kernel)."""
    cache = cache or cache_mod.default_cache()
    key = cache_key(spec, compiler, miss_hint)
    entry, built = cache.get_or_build(key, _compile(spec, key, compiler, cache),
                                      describe=lambda: _describe_miss(spec, key, miss_hint))
    problem = index_mod.expectation_problem(_expectation(spec), entry.meta)
    if problem and not built:
        # An entry under this key that is not this specialisation was planted or forged: never run it.
        cache.invalidate(key, f"it is not the kernel its key names ({problem})")
        entry, built = cache.get_or_build(key, _compile(spec, key, compiler, cache),
                                          describe=lambda: _describe_miss(spec, key, miss_hint))
    return Built(spec.op, spec.target.id, key, entry.code, entry.meta, spec.param_dict, built)


def _describe_miss(spec: Specialization, key, miss_hint) -> str:
    text = spec.describe() + (f" (key {key})" if key else "")
    return f"{text}.\n{miss_hint()}" if miss_hint is not None else text


_loaded: dict = {}   # (key, device kind, device index) -> loaded kernel


def load_spec(spec: Specialization, device, dynamic_smem: int = 0, compiler=None, miss_hint=None):
    key = cache_key(spec, compiler, miss_hint)
    slot = (key, device.kind, device.index)
    kernel = _loaded.get(slot)
    if kernel is not None:
        return kernel
    built = build_spec(spec, compiler, miss_hint=miss_hint)
    try:
        kernel = device.load(built.code, spec.entry, dynamic_smem)
    except Exception as e:
        if not isinstance(e, InvalidImageError) or built.compiled:
            raise
        # A cached image the runtime rejects is as corrupt as a bad checksum: set it aside, rebuild.
        cache_mod.default_cache().invalidate(key, f"runtime rejected the image: {e}")
        built = build_spec(spec, compiler, miss_hint=miss_hint)
        kernel = device.load(built.code, spec.entry, dynamic_smem)
    _loaded[slot] = kernel
    return kernel


def reset() -> None:
    """Forget memoised keys, loaded kernels and precompiled-header decisions (the on-disk cache is
    untouched)."""
    _keys.clear()
    _loaded.clear()
    spec_mod.reset()
    pch_mod = sys.modules.get(f"{__package__}.pch")   # nothing to forget if no compile imported it
    if pch_mod is not None:
        pch_mod.reset()
