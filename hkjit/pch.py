"""Precompiled headers: compile a unit with the parsed form of its kernel source and headers.

Every generated unit starts with `#include "<kernel source>"`; everything the front end reads
before the unit's few lines of its own is the same for every specialisation of that source. A
precompiled header (PCH) of that include, built once, saves parsing it again. What it saves is
the front end's share of a compile, measured at 5-7% (docs/notes/cold_compile.md): the
optimiser and code generator, which a PCH cannot touch, take the rest.

* Key: the compiler's identity, its options (include folders too: a PCH records the paths of the
  headers it read), the target, the prefix it stands for and the sha256 of every file the kernel
  source includes, transitively. A changed header is a new key, so a stale PCH is never used.
* clang (pch_scope "disk"): stored in the cache (cache/pch.py) and used by every later compile of
  that source, in any process. The first compile of a source builds it (a second clang process,
  under the key's lock) while compiling the unit without one, so that compile costs no more than
  before. The compiler reads a private copy of the checked bytes; clang also checks each header
  against the PCH (by content) before it uses it.
* NVRTC (pch_scope "process"): its PCH can only be read by the process that wrote it (a dump of
  its PCH heap, mapped at a random address per process), so it lives in a private temporary folder
  for the life of the process. Writing it costs about what using it saves once (the front end
  takes twice as long), so a process writes one at its second compile of a source and uses it from
  the third on: one compile per source costs nothing more, a sweep of many gains.
* Same key, same bytes: the code object is the same with or without a PCH (tests compare them);
  the kernel's cache key never depends on whether one was used.
* A PCH problem never fails a build: when a compile with a PCH fails, the unit is compiled
  without one. If that fails too, its error is the kernel's and is raised as always; if it
  succeeds, one warning line says the PCH was set aside, and this process stops trying it.

HKJIT_PCH=0 turns it off. `CompileResult.pch` (and the entry's `meta["pch"]`) says what happened:
"used", "built" (clang: built beside this compile, for the next ones), "created" (NVRTC: written
by this compile, for the next ones in this process), "off" (none: turned off, not supported, or
given up in this process) or "failed" (compiled without one after it failed; warned once).
"""

import atexit
import os
import shutil
import tempfile
import threading
import warnings
from pathlib import Path

from . import cache as cache_mod
from . import compiler as compiler_mod
from . import spec as spec_mod
from ._version import __version__
from .compiler import CompileResult, PchUse
from .errors import CacheWarning, CompileError

_OFF = ("0", "off", "false", "no")
_given_up: set = set()          # PCH keys this process stopped trying (a failure, or NVRTC would not create it)
_process_pchs: dict = {}        # NVRTC: PCH key -> file this process created
_process_seen: set = set()      # NVRTC: PCH keys this process compiled once without one
_process_state = {"pid": None, "dir": None}
_nvrtc_pch = threading.Lock()   # one NVRTC compile with a PCH at a time; others compile without


def enabled() -> bool:
    return os.environ.get("HKJIT_PCH", "").strip().lower() not in _OFF


def pch_key(spec: spec_mod.Specialization, comp, include_dirs) -> str:
    return cache_mod.make_key({
        "kind": "precompiled header",
        "compiler": comp.identity,
        "flags": [str(f) for f in comp.flags(spec.target, include_dirs)],
        "target": spec.target.id,
        "source": spec.source,
        "files": spec_mod.header_closure(spec.source),
        "hkjit": __version__,
    })


def compile_unit(comp, text: str, path: Path, spec: spec_mod.Specialization, include_dirs,
                 cache) -> CompileResult:
    """Compile the generated unit `text` (written at `path`) with a PCH where the compiler has one."""
    def plain(status):
        result = comp.compile(text, path, spec.target, include_dirs, spec.entry)
        result.pch = status
        return result

    if comp.pch_scope is None or not enabled():
        return plain("off")
    key = pch_key(spec, comp, include_dirs)
    if key in _given_up:
        return plain("off")
    try:
        if comp.pch_scope == "disk":
            return _with_stored_pch(comp, text, path, spec, include_dirs, cache, key)
        return _with_process_pch(comp, text, path, spec, include_dirs, key, plain)
    except (CompileError, OSError) as e:   # OSError: the private copy could not be written
        result = plain("failed")   # raises the kernel's own error when the kernel is at fault
        _give_up(key, comp, spec, e, cache if comp.pch_scope == "disk" else None)
        return result


def _with_stored_pch(comp, text, path, spec, include_dirs, cache, key) -> CompileResult:
    data = cache.pch.get(key)
    if data is None:
        return _compile_while_building(comp, text, path, spec, include_dirs, cache, key)
    copy = compiler_mod.output_path(path, "pch-use")
    try:
        compiler_mod.write_private(copy, data)
        result = comp.compile(text, path, spec.target, include_dirs, spec.entry, PchUse(copy))
    finally:
        copy.unlink(missing_ok=True)
    result.pch = "used"
    return result


def _compile_while_building(comp, text, path, spec, include_dirs, cache, key) -> CompileResult:
    """The first compile of a source: compile without a PCH while another thread builds the PCH
    (a second clang process), so the first compile costs no more than before and the next finds
    it. Several first compiles at once share one build (the key's lock)."""
    failure = []

    def build():
        data = comp.build_pch(_kernel_source(spec.source, include_dirs), path, spec.target, include_dirs)
        return data, {"kind": "precompiled header", "compiler": comp.identity, "target": spec.target.id,
                      "source": spec.source}

    def build_and_store():
        try:
            cache.pch.get_or_build(key, build)
        except (CompileError, OSError) as e:
            failure.append(e)

    builder = threading.Thread(target=build_and_store, name="hkjit-pch", daemon=True)
    builder.start()
    try:
        result = comp.compile(text, path, spec.target, include_dirs, spec.entry)
    finally:
        builder.join()
    result.pch = "built"
    if failure:
        _give_up(key, comp, spec, failure[0], cache)
        result.pch = "failed"
    return result


def _kernel_source(name: str, include_dirs) -> Path:
    """The file the unit's `#include "<name>"` reads: the first include folder holding it, as the
    compiler searches them."""
    for folder in include_dirs:
        candidate = Path(folder) / name
        if candidate.is_file():
            return candidate
    raise CompileError(f'kernel source "{name}" not found in {", ".join(map(str, include_dirs))}')


def _with_process_pch(comp, text, path, spec, include_dirs, key, plain) -> CompileResult:
    if not _nvrtc_pch.acquire(blocking=False):
        return plain("off")   # another thread of this process is compiling with one
    try:
        pchs = _this_process_pchs()
        known = pchs.get(key)
        if known is not None:
            result = comp.compile(text, path, spec.target, include_dirs, spec.entry, PchUse(known))
            if result.pch != "used":   # compiled without it (NVRTC said why in the log)
                pchs.pop(key, None)
                _given_up.add(key)
                result.pch = "off"
            return result
        if key not in _process_seen:
            _process_seen.add(key)
            return plain("off")
        target = _process_dir() / f"{key[:32]}.pch"
        result = comp.compile(text, path, spec.target, include_dirs, spec.entry, PchUse(target, create=True))
        if result.pch == "created":
            pchs[key] = target
        else:
            _given_up.add(key)   # e.g. NVRTC's PCH heap too small for it: not worth a warning
            result.pch = "off"
        return result
    finally:
        _nvrtc_pch.release()


def _give_up(key, comp, spec, error, cache) -> None:
    """The unit compiled without a PCH after failing with one: say so once, stop trying it here,
    and set a stored PCH aside so the next process builds a fresh one."""
    _given_up.add(key)
    _this_process_pchs().pop(key, None)
    first = (str(error).strip().splitlines() or [""])[0]
    log = (getattr(error, "log", "") or "").strip().splitlines()
    why = f"{first}: {log[0]}" if log else first
    if cache is not None:
        cache.pch.discard(key)
    warnings.warn(f"hkjit: the precompiled header of {spec.source} for {spec.target.id} ({comp.name}) did not "
                  f"work ({why[:200]}); compiled without it", CacheWarning, stacklevel=5)


def _this_process_pchs() -> dict:
    """NVRTC's PCHs of this process (a forked child starts with none of its own)."""
    if _process_state["pid"] != os.getpid():
        _process_pchs.clear()
        _process_seen.clear()
        _process_state.update(pid=os.getpid(), dir=None)
    return _process_pchs


def _process_dir() -> Path:
    """A private temporary folder (mkdtemp: 0700, unpredictable) for this process's NVRTC PCHs,
    removed when it exits."""
    _this_process_pchs()
    if _process_state["dir"] is None:
        folder = Path(tempfile.mkdtemp(prefix="hkjit-pch-"))
        pid = os.getpid()
        atexit.register(lambda: os.getpid() == pid and shutil.rmtree(folder, ignore_errors=True))
        _process_state["dir"] = folder
    return _process_state["dir"]


def reset(process_pchs: bool = False) -> None:
    """Forget which PCHs this process gave up on (hkjit.reset_state). NVRTC's PCHs of this process
    stay (their keys cover everything they depend on) unless `process_pchs`: then the next compile
    of each source writes a new one, as in a fresh process (the cold-compile benchmark)."""
    _given_up.clear()
    if process_pchs:
        _process_pchs.clear()
        _process_seen.clear()
