"""Deployment: precompile manifests, recording what a run used, bundles, cache export/import.

A manifest (TOML, see docs/deployment.md) names specialisations: each is an op, one or more
targets and the keyword arguments `hkjit.build` takes. `precompile` builds every one of them (no
GPU needed: compiling is cross-compiling) and writes a bundle, a directory or a .zip that hkjit
searches at run time (HKJIT_BUNDLE_PATH) before its own cache. `record` appends the
specialisations a real run used to the manifest named by HKJIT_RECORD, so that run can be replayed.
"""

import concurrent.futures
import hashlib
import itertools
import json
import os
import shutil
import threading
import time
import tomllib
import warnings
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from . import cache as cache_mod
from .cache import BUNDLE_FORMAT_VERSION, BUNDLE_MANIFEST, Bundle, CacheWarning, encode_entry, entry_relpath
from .errors import CacheError, HKJitError, InvalidArgumentError
from .manifest import MANIFEST_VERSION, kernel_table, manifest_line, plain_params

try:
    import fcntl
except ImportError:   # Windows: recording still works, without the cross-process append lock
    fcntl = None

_SPECIAL_KEYS = {"op", "target", "targets", "shapes", "dtypes", "sweep"}


# -------------------------------------------------------------------------------------- manifests

@dataclass(frozen=True)
class Job:
    """One specialisation to build: `hkjit.build(op, target=target, **params)`."""
    op: str
    target: str
    params: tuple             # sorted (name, value) pairs, so equal jobs compare and hash equal
    origin: str = field(default="", compare=False)   # where the manifest named it, for errors

    @property
    def param_dict(self) -> dict:
        return dict(self.params)

    def describe(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.params)
        return f"{self.op} for {self.target}" + (f" ({args})" if args else "")

    def manifest_line(self) -> str:
        return manifest_line(self.op, self.target, self.param_dict)


def load_manifest(path, *, archs=None, ops=None, shape_params=None) -> list[Job]:
    """Every specialisation a manifest names, expanded and de-duplicated, in file order.

    `archs` (the --arch list), when given, replaces every entry's targets; `ops` keeps only those ops;
    `shape_params(op)` names an op's shape parameters, so a manifest may write `shapes = [[8192, 8192,
    8192]]` (the CLI passes the op registry's)."""
    path = Path(path)
    try:
        doc = tomllib.loads(path.read_text())
    except OSError as e:
        raise InvalidArgumentError(f"cannot read manifest {path}: {e}") from None
    except tomllib.TOMLDecodeError as e:
        raise InvalidArgumentError(f"manifest {path} is not valid TOML: {e}") from None
    return jobs_from_manifest(doc, str(path), archs=archs, ops=ops, shape_params=shape_params)


def jobs_from_manifest(doc: dict, name: str = "<manifest>", *, archs=None, ops=None,
                       shape_params=None) -> list[Job]:
    version = doc.get("version", MANIFEST_VERSION)
    if version != MANIFEST_VERSION:
        raise InvalidArgumentError(f"{name}: manifest version {version!r}; this hkjit reads version {MANIFEST_VERSION}")
    unknown = set(doc) - {"version", "defaults", "kernel", "kernels"}
    if unknown:
        raise InvalidArgumentError(f"{name}: unknown top-level key(s) {', '.join(sorted(unknown))}; a manifest "
                                   "holds `version`, `[defaults]`, `kernels = [...]` and `[[kernel]]` tables")
    defaults = doc.get("defaults", {})
    if not isinstance(defaults, dict):
        raise InvalidArgumentError(f"{name}: `defaults` must be a table")
    entries = [(f"kernels[{i}]", e) for i, e in enumerate(doc.get("kernels", []))]
    entries += [(f"[[kernel]] #{i + 1}", e) for i, e in enumerate(doc.get("kernel", []))]
    jobs, seen = [], set()
    for where, entry in entries:
        for job in _expand(entry, defaults, f"{name} {where}", archs, shape_params):
            if (ops is None or job.op in ops) and job not in seen:
                seen.add(job)
                jobs.append(job)
    return jobs


def _expand(entry, defaults: dict, where: str, archs, shape_params) -> list[Job]:
    if not isinstance(entry, dict):
        raise InvalidArgumentError(f"{where}: each kernel must be a table, got {entry!r}")
    if "kernels" in entry or "kernel" in entry:
        # TOML puts a key written after a [[kernel]] header into that table: an easy slip.
        raise InvalidArgumentError(f"{where}: holds `kernels`; write `kernels = [...]` before any [table] "
                                   "header of the manifest")
    merged = {**defaults, **entry}
    op = merged.get("op")
    if not isinstance(op, str) or not op:
        raise InvalidArgumentError(f'{where}: missing `op` (e.g. op = "gemm")')
    targets = _targets(merged, where, archs)
    fixed = {k: v for k, v in merged.items() if k not in _SPECIAL_KEYS}
    axes = [[{}]]
    if "shapes" in merged:
        names = shape_params(op) if shape_params else None
        axes.append([_shape(op, names, s, where) for s in _as_list(merged["shapes"], "shapes", where)])
    if "dtypes" in merged:
        axes.append([{"dtype": d} for d in _as_list(merged["dtypes"], "dtypes", where)])
    sweep = merged.get("sweep", {})
    if not isinstance(sweep, dict):
        raise InvalidArgumentError(f"{where}: `sweep` must be a table of lists, e.g. sweep = {{ block_m = [128, 256] }}")
    for name, values in sweep.items():
        axes.append([{name: v} for v in _as_list(values, f"sweep.{name}", where)])
    jobs = []
    for target in targets:
        for combo in itertools.product(*axes):
            params = dict(fixed)
            for part in combo:
                params.update(part)
            jobs.append(Job(op, target, tuple(sorted((k, _freeze(v)) for k, v in params.items())), where))
    return jobs


def _freeze(value):
    # Jobs are de-duplicated in sets; a list-valued parameter must be hashable too.
    if isinstance(value, dict):
        raise InvalidArgumentError(f"parameter value {value!r}: build() parameters are numbers, strings, "
                                   "booleans or lists of them")
    return tuple(_freeze(v) for v in value) if isinstance(value, list) else value


def _targets(merged: dict, where: str, archs) -> list[str]:
    if archs:
        return list(archs)
    if "targets" in merged and "target" in merged:
        raise InvalidArgumentError(f"{where}: give `target` or `targets`, not both")
    targets = merged.get("targets", merged.get("target"))
    if targets is None:
        raise InvalidArgumentError(f"{where}: no target; add target = \"gfx950\" (or targets = [...]) or "
                                   "pass --arch")
    targets = [targets] if isinstance(targets, str) else targets
    if not isinstance(targets, list) or not all(isinstance(t, str) for t in targets) or not targets:
        raise InvalidArgumentError(f"{where}: targets must be a list of target names, got {targets!r}")
    return targets


def _as_list(value, name: str, where: str) -> list:
    if not isinstance(value, list) or not value:
        raise InvalidArgumentError(f"{where}: `{name}` must be a non-empty list, got {value!r}")
    return value


def _shape(op: str, names, shape, where: str) -> dict:
    """A shape as keyword arguments: {m=..,n=..,k=..}, [m, n, k] or "MxNxK"."""
    if isinstance(shape, dict):
        return shape
    if isinstance(shape, str):
        try:
            shape = [int(x) for x in shape.lower().split("x")]
        except ValueError:
            raise InvalidArgumentError(f'{where}: shape {shape!r}: write e.g. "8192x8192x8192"') from None
    if names is None or not isinstance(shape, list) or len(shape) != len(names):
        hint = f"[{', '.join(names)}]" if names else "a table such as { m = 8192, n = 8192 }"
        raise InvalidArgumentError(f"{where}: shape {shape!r} for {op}: write {hint}")
    return dict(zip(names, shape))


# ---------------------------------------------------------------------------------------- record

class _Recorder:
    """Appends each new specialisation to one manifest file. Several processes may record into the
    same file (e.g. the ranks of one job): each block is one write under an flock, and what the file
    already holds is not written again."""

    def __init__(self, path: Path):
        self.path = path
        self.mutex = threading.Lock()
        self.seen = self._already_recorded()

    def _already_recorded(self) -> set:
        """What the file holds; a file that is not empty and not an hkjit manifest is refused, so
        HKJIT_RECORD can never append to some other file."""
        try:
            if self.path.is_symlink() or (self.path.exists() and self.path.stat().st_size == 0):
                if self.path.is_symlink():
                    raise InvalidArgumentError(f"{self.path} is a symbolic link; HKJIT_RECORD writes only "
                                               "to a regular manifest file")
                return set()
            doc = tomllib.loads(self.path.read_text())
        except FileNotFoundError:
            return set()
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
            raise InvalidArgumentError(f"{self.path} is not an hkjit manifest ({e}); HKJIT_RECORD appends only "
                                       "to manifests it wrote: name a new file") from None
        if doc.get("version") != MANIFEST_VERSION:
            raise InvalidArgumentError(f"{self.path} is not an hkjit manifest (no `version = {MANIFEST_VERSION}`); "
                                       "HKJIT_RECORD appends only to manifests it wrote: name a new file")
        return set(jobs_from_manifest(doc, str(self.path)))

    def add(self, op: str, target: str, params: dict):
        job = Job(op, target, tuple(plain_params(params).items()))
        with self.mutex:
            if job in self.seen:
                return
            self.seen.add(job)
            self._append(job)

    def _append(self, job: Job):
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o644)
        try:
            if fcntl is not None:
                fcntl.flock(fd, fcntl.LOCK_EX)
            head = "" if os.fstat(fd).st_size else (
                f"# Specialisations recorded by HKJIT_RECORD (hkjit {cache_mod.hkjit_version()}).\n"
                "# Replay: hkjit precompile --shapes THIS_FILE -o BUNDLE\n"
                f"version = {MANIFEST_VERSION}\n")
            block = kernel_table(job.op, job.target, job.param_dict)
            os.write(fd, (head + "\n" + block).encode())
        finally:
            os.close(fd)   # closing drops the flock


_recorders: dict = {}
_recorders_mutex = threading.Lock()


def record(op: str, target: str, params: dict) -> None:
    """Note that this run used `op` on `target` with `params` (hkjit.build's keywords), when
    HKJIT_RECORD names a manifest file. Costs one environment lookup when it does not. Never raises:
    a recording problem must not stop the program being recorded."""
    path = os.environ.get("HKJIT_RECORD")
    if not path:
        return
    try:
        recorder = _recorders.get(path)
        if recorder is None:
            with _recorders_mutex:
                recorder = _recorders.setdefault(path, _Recorder(Path(path)))
        recorder.add(op, target, params)
    except Exception as e:  # noqa: BLE001  (see docstring)
        warnings.warn(f"hkjit: could not record {op} for {target} into HKJIT_RECORD={path}: {e}",
                      CacheWarning, stacklevel=2)


# --------------------------------------------------------------------------------------- bundles

class BundleWriter:
    """Writes a bundle to a directory or, when `dest` ends in .zip, one archive. Nothing appears at
    `dest` until `close()`: the bundle is staged beside it and renamed into place, so a reader never
    sees half a bundle."""

    def __init__(self, dest):
        self.dest = Path(dest)
        self.is_zip = self.dest.suffix == ".zip"
        _check_replaceable(self.dest)
        self.dest.parent.mkdir(parents=True, exist_ok=True)
        tag = f"{os.getpid()}.{time.time_ns()}"
        self.staging = self.dest.with_name(f".{self.dest.name}.{tag}.tmp")
        self.records: dict[str, dict] = {}
        self.toolchains: dict[tuple, dict] = {}
        if self.is_zip:
            self._zip = zipfile.ZipFile(self.staging, "w", zipfile.ZIP_STORED)
        else:
            self.staging.mkdir()

    def add(self, key: str, code: bytes, meta: dict, *, op: str, target: str, params: dict):
        if key in self.records:
            return
        blob = encode_entry(key, code, meta)
        rel = entry_relpath(key)
        self._write(rel, blob)
        self.records[key] = {"key": key, "path": rel, "size": len(blob),
                             "sha256": hashlib.sha256(blob).hexdigest(),
                             "op": op, "target": target, "params": plain_params(params)}
        compiler = meta.get("compiler")
        if compiler:
            toolchain = {"target": target, "compiler": compiler, "flags": meta.get("flags")}
            self.toolchains.setdefault((target, compiler, json.dumps(meta.get("flags"))), toolchain)

    def add_blob(self, record: dict, blob: bytes):
        """Copy an entry as is (cache export): `record` as a bundle manifest lists it."""
        if record["key"] not in self.records:
            self._write(record["path"], blob)
            self.records[record["key"]] = record

    def close(self) -> Path:
        manifest = {
            "format": "hkjit-bundle", "version": BUNDLE_FORMAT_VERSION,
            "hkjit_version": cache_mod.hkjit_version(), "cache_format": cache_mod.CACHE_FORMAT_VERSION,
            "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "toolchains": list(self.toolchains.values()),
            "entries": sorted(self.records.values(), key=lambda r: (r["op"], r["target"], r["key"])),
        }
        self._write(BUNDLE_MANIFEST, json.dumps(manifest, indent=1, sort_keys=True).encode())
        if self.is_zip:
            self._zip.close()
            os.replace(self.staging, self.dest)
        else:
            _swap_directory(self.staging, self.dest)
        return self.dest

    def abort(self):
        if self.is_zip:
            self._zip.close()
            self.staging.unlink(missing_ok=True)
        else:
            shutil.rmtree(self.staging, ignore_errors=True)

    def _write(self, rel: str, data: bytes):
        if self.is_zip:
            self._zip.writestr(rel, data)
        else:
            target = self.staging / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)


def _check_replaceable(dest: Path):
    """Refuse to replace anything hkjit cannot prove it wrote: an existing output must be an empty
    directory, or a bundle whose manifest is hkjit's and lists every file it holds."""
    if dest.is_symlink():
        raise InvalidArgumentError(f"{dest} is a symbolic link; choose a new output path (-o)")
    if not dest.exists():
        return
    if dest.is_dir():
        if any(dest.iterdir()) and not _is_bundle_directory(dest):
            raise InvalidArgumentError(f"{dest} is a non-empty directory that is not an hkjit bundle (hkjit "
                                       "replaces only a bundle it wrote, holding only the files its manifest "
                                       "lists); choose a new output path (-o)")
    elif not _is_bundle_archive(dest):
        raise InvalidArgumentError(f"{dest} exists and is not a bundle archive; choose a new output path (-o)")


def _bundle_manifest_paths(text: bytes) -> set | None:
    """The member paths an hkjit bundle manifest lists (itself included), or None if it is not one."""
    try:
        manifest = json.loads(text)
        if manifest.get("format") != "hkjit-bundle" or not isinstance(manifest.get("entries"), list):
            return None
        return {BUNDLE_MANIFEST} | {str(r["path"]) for r in manifest["entries"]}
    except (ValueError, TypeError, KeyError, AttributeError):
        return None


def _is_bundle_directory(path: Path) -> bool:
    try:
        listed = _bundle_manifest_paths((path / BUNDLE_MANIFEST).read_bytes())
        if listed is None:
            return False
        for f in path.rglob("*"):
            if f.is_symlink() or (f.is_file() and f.relative_to(path).as_posix() not in listed):
                return False
        return True
    except OSError:
        return False


def _is_bundle_archive(path: Path) -> bool:
    try:
        with zipfile.ZipFile(path) as z:
            return BUNDLE_MANIFEST in z.namelist() and _bundle_manifest_paths(z.read(BUNDLE_MANIFEST)) is not None
    except (OSError, zipfile.BadZipFile):
        return False


def _swap_directory(staging: Path, dest: Path):
    # Rename-based replacement: a process reading the old bundle keeps its open files; one that
    # opens files after the swap sees the whole new bundle (Bundle re-reads a changed manifest).
    old = None
    if dest.exists():
        old = dest.with_name(f".{dest.name}.{os.getpid()}.{time.time_ns()}.old")
        os.rename(dest, old)
    os.rename(staging, dest)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def verify_bundle(path) -> list[str]:
    """Problems with a bundle, one line each (empty: every entry whole and as the manifest says)."""
    bundle = Bundle(path)
    problems = bundle.verify()
    if not problems and not bundle.path.is_file():
        listed = {r["path"] for r in bundle.manifest["entries"]}
        for f in sorted((bundle.path / "entries").glob(f"*/*{cache_mod.ENTRY_SUFFIX}")):
            rel = f.relative_to(bundle.path).as_posix()
            if rel not in listed:
                problems.append(f"{rel}: not listed in {BUNDLE_MANIFEST} (left over or added by hand)")
    return problems


def export_cache(cache: cache_mod.Cache, dest, *, ops=None, targets=None) -> int:
    """Write the cache's valid entries (optionally only some ops/targets) as a bundle; returns the count."""
    writer = BundleWriter(dest)
    try:
        for info in cache.entries():
            meta = info.meta
            if info.problem or (ops and meta.get("op") not in ops) or (targets and meta.get("target") not in targets):
                continue
            entry = cache.get(info.key)   # verifies the checksum, sets aside a corrupt one
            if entry is None:
                continue
            writer.add(entry.key, entry.code, entry.meta, op=meta.get("op", "?"),
                       target=meta.get("target", "?"), params=meta.get("params") or {})
        writer.close()
    except BaseException:
        writer.abort()
        raise
    return len(writer.records)


def import_bundle(cache: cache_mod.Cache, source) -> int:
    """Copy every entry of a bundle into the cache, all or nothing: the manifest is validated whole
    (Bundle), each entry is checked against it as it is staged, and entries are renamed into place
    only once every one is staged; on any failure the cache is left as it was. Returns the count."""
    bundle = Bundle(source)
    records = bundle.manifest["entries"]   # BundleError on a malformed manifest: nothing written yet

    def checked_entries():
        for record in records:
            entry = bundle.get(record["key"])   # BundleError on a damaged or tampered entry
            yield entry.key, entry.code, entry.meta
    try:
        cache.put_all(checked_entries())
    except OSError as e:
        raise CacheError(f"could not import {bundle.path} into {cache.root}: {e.strerror or e}; nothing was "
                         "imported (the cache is as it was). Free disk space there or point "
                         "HKJIT_CACHE_DIR at a writable folder.") from None
    # A host with no compiler finds imported kernels by the toolchain they were built with.
    cache.add_toolchains(bundle.manifest.get("toolchains", []))
    return len(records)


# ------------------------------------------------------------------------------------ precompile

@dataclass
class Outcome:
    job: Job
    status: str               # "compiled", "reused" or "failed"
    key: str = ""
    seconds: float = 0.0
    error: str = ""


@dataclass
class PrecompileReport:
    outcomes: list
    bundle: Path | None
    entries: int

    def count(self, status: str) -> int:
        return sum(o.status == status for o in self.outcomes)

    @property
    def failed(self) -> list:
        return [o for o in self.outcomes if o.status == "failed"]

    def summary(self) -> str:
        lines = [f"{len(self.outcomes)} specialisations: {self.count('compiled')} compiled, "
                 f"{self.count('reused')} reused, {self.count('failed')} failed; "
                 f"bundle {self.bundle} holds {self.entries} kernels"]
        for o in self.failed:
            lines.append(f"  FAILED {o.job.describe()} [{o.job.origin}]: {o.error}")
        return "\n".join(lines)


def _build_one(build: Callable, job: Job) -> tuple[Outcome, object]:
    t0 = time.perf_counter()
    try:
        built = build(job.op, target=job.target, **job.param_dict)
    except HKJitError as e:
        return Outcome(job, "failed", seconds=time.perf_counter() - t0, error=_first_lines(e)), None
    except Exception as e:  # noqa: BLE001  a bug in one op must not hide the other results
        return Outcome(job, "failed", seconds=time.perf_counter() - t0,
                       error=f"{type(e).__name__}: {_first_lines(e)}"), None
    status = "compiled" if getattr(built, "compiled", False) else "reused"
    return Outcome(job, status, built.key, time.perf_counter() - t0), built


def _first_lines(error, n: int = 6) -> str:
    lines = str(error).strip().splitlines()
    return "\n    ".join(lines[:n] + ([f"... ({len(lines) - n} more lines)"] if len(lines) > n else []))


def precompile(jobs: list[Job], dest, *, build: Callable, parallel: int | None = None,
               progress: Callable[[int, int, Outcome], None] | None = None) -> PrecompileReport:
    """Build every job (`parallel` at a time, default: the CPU count) and write the successes to a
    bundle at `dest`.

    Compiles run in threads, not processes: clang is a process of its own and NVRTC releases the
    GIL while it compiles (two NVRTC compiles in two threads took 0.78 s, one after the other 1.45 s),
    so threads compile in parallel without a process pool's start-up and imports, and one process
    shares one cache and its single-flight locks (docs/notes/cold_compile.md has the figures)."""
    writer = BundleWriter(dest)
    outcomes = []
    try:
        with concurrent.futures.ThreadPoolExecutor(max_workers=parallel or os.cpu_count() or 1) as pool:
            futures = [pool.submit(_build_one, build, job) for job in jobs]
            for future in concurrent.futures.as_completed(futures):
                outcome, built = future.result()
                if built is not None:
                    writer.add(built.key, built.code, built.meta, op=outcome.job.op,
                               target=getattr(built, "target", outcome.job.target), params=outcome.job.param_dict)
                outcomes.append(outcome)
                if progress:
                    progress(len(outcomes), len(jobs), outcome)
        path = writer.close()
    except BaseException:
        writer.abort()
        raise
    order = {job: i for i, job in enumerate(jobs)}
    outcomes.sort(key=lambda o: order[o.job])
    return PrecompileReport(outcomes, path, len(writer.records))


def describe_bundle(path) -> list[dict]:
    """The manifest records of a bundle (for `hkjit bundle ls`)."""
    return list(Bundle(path).manifest["entries"])

