"""Reading bundles: read-only sets of precompiled entries (a directory or a .zip) listed by a
manifest that holds every entry's size and sha256. hkjit.deploy writes them; this module only reads."""

from __future__ import annotations

import hashlib
import json
import os
import threading
import warnings
from contextlib import suppress
from pathlib import Path, PurePosixPath

from ..errors import BundleError, CacheWarning
from .entry import CorruptEntryError, Entry, decode_entry, hkjit_version
from .key import entry_relpath

BUNDLE_MANIFEST = "hkjit-bundle.json"
BUNDLE_FORMAT_VERSION = 1

# Size caps on what a bundle may make us read. A bundle comes from elsewhere; a tiny zip member can
# declare (and inflate to) gigabytes. The declared size is checked before reading, and the read
# itself stops one byte past the cap, so memory stays bounded whatever the archive claims.
MAX_MANIFEST_BYTES = 64 << 20   # ~300 bytes a record: room for 200k kernels
MAX_ENTRY_BYTES = 512 << 20     # a code object is kilobytes to a few MB; 512 MB is far past any kernel
MAX_TOOLCHAINS = 1024           # distinct (target, compiler, flags) triples; real bundles hold a few
_HEX = frozenset("0123456789abcdef")


class Bundle:
    """A read-only set of precompiled entries: a directory or a .zip holding `hkjit-bundle.json`
    and `entries/<key[:2]>/<key>.hkc`. The manifest lists every entry's key, path, size and the
    sha256 of its file; an entry that does not match is rejected (BundleError), never used.
    Nothing here ever writes to the bundle."""

    def __init__(self, path):
        self.path = Path(path).expanduser()
        self._manifest = None
        self._index = None
        self._zip = None
        self._loaded_stamp = None
        self._mutex = threading.RLock()   # loading the manifest reads a zip member under it too

    def __repr__(self):
        return f"Bundle({str(self.path)!r})"

    @property
    def exists(self) -> bool:
        return self.path.exists()

    @property
    def manifest(self) -> dict:
        if self._manifest is None:
            with self._mutex:
                if self._manifest is None:
                    self._manifest = self._load_manifest()
        return self._manifest

    @property
    def index(self) -> dict:
        """key -> manifest record."""
        if self._index is None:
            self._index = {r["key"]: r for r in self.manifest["entries"]}
        return self._index

    def toolchains(self, target_id: str) -> list[dict]:
        """The compilers (identity, flags) this bundle's entries for `target_id` were built with."""
        return [t for t in self.manifest.get("toolchains", []) if t.get("target") == target_id]

    def get(self, key: str) -> Entry | None:
        record = self.index.get(key)
        if record is None:
            return None
        try:
            blob = self.read_member(record["path"], record["size"])
            problem = self._check_record(record, blob)
        except BundleError as e:
            problem = str(e)
        if problem and self._reload_if_replaced():
            return self.get(key)   # rebuilt in place since we read its manifest: use the new one
        if problem:
            raise BundleError(f"bundle {self.path}: entry {key} ({record['path']}) was rejected: {problem}. "
                              f"The bundle was damaged or tampered with after it was built; run "
                              f"`hkjit bundle verify {self.path}` and rebuild or re-copy it.")
        entry, _ = decode_entry(blob, key)
        entry.source = f"bundle:{self.path}"
        return entry

    def read_member(self, relpath: str, limit: int = MAX_ENTRY_BYTES) -> bytes:
        """The bytes of one member, at most `limit` (BundleError past it: declared or actual size).
        Never through a link in a directory bundle, never outside the bundle."""
        _check_member_path(relpath, self.path)
        try:
            if self._is_zip():
                with self._mutex:
                    info = self._zipfile().getinfo(relpath)
                    if info.file_size > limit:
                        raise self._too_large(relpath, info.file_size, limit)
                    with self._zipfile().open(info) as f:
                        blob = f.read(limit + 1)
            else:
                fd = os.open(self.path / relpath, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
                with os.fdopen(fd, "rb") as f:
                    blob = f.read(limit + 1)
        except (OSError, KeyError, _zipmodule().BadZipFile, RuntimeError, EOFError) as e:
            raise BundleError(f"bundle {self.path}: cannot read {relpath}: {e}; the bundle is incomplete "
                              "or not a plain file tree, rebuild or re-copy it") from None
        if len(blob) > limit:
            raise self._too_large(relpath, f"more than {limit}", limit)
        return blob

    def _too_large(self, relpath, size, limit) -> BundleError:
        return BundleError(f"bundle {self.path}: {relpath} is {size} bytes, over hkjit's cap of {limit}; "
                           "this is not a bundle hkjit wrote (a zip bomb or a damaged archive)")

    def verify(self) -> list[str]:
        """Every problem found, one line each; empty when every listed entry is whole and genuine."""
        try:
            records = self.manifest["entries"]
        except BundleError as e:
            return [str(e)]
        problems = []
        for record in records:
            try:
                problem = self._check_record(record, self.read_member(record["path"]))
            except BundleError as e:
                problem = str(e)
            if problem:
                problems.append(f"{record['path']}: {problem}")
        return problems

    @staticmethod
    def _check_record(record: dict, blob: bytes) -> str | None:
        if len(blob) != record.get("size"):
            return f"size {len(blob)} bytes, the manifest says {record.get('size')}"
        actual = hashlib.sha256(blob).hexdigest()
        if actual != record.get("sha256"):
            return f"sha256 {actual}, the manifest says {record.get('sha256')}"
        try:
            decode_entry(blob, record["key"])
        except CorruptEntryError as e:
            return f"not a valid entry: {e}"
        return None

    def _is_zip(self) -> bool:
        return self.path.is_file()

    def _stamp(self):
        with suppress(OSError):
            st = os.stat(self.path if self._is_zip() else self.path / BUNDLE_MANIFEST)
            return st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size
        return None

    def _reload_if_replaced(self) -> bool:
        if self._manifest is None or self._stamp() == self._loaded_stamp:
            return False
        with self._mutex:
            self._manifest = self._index = None
            if self._zip is not None:
                self._zip.close()
                self._zip = None
        return True

    def _zipfile(self):
        if self._zip is None:
            self._zip = _zipmodule().ZipFile(self.path)
        return self._zip

    def _load_manifest(self) -> dict:
        self._loaded_stamp = self._stamp()
        if not self.path.exists():
            raise BundleError(f"bundle {self.path} does not exist; fix HKJIT_BUNDLE_PATH or copy the bundle there")
        try:
            manifest = json.loads(self.read_member(BUNDLE_MANIFEST, MAX_MANIFEST_BYTES))
        except ValueError as e:
            raise BundleError(f"bundle {self.path}: {BUNDLE_MANIFEST} is not JSON ({e}); rebuild the bundle") from None
        except _zipmodule().BadZipFile:
            raise BundleError(f"bundle {self.path} is a file but not a zip archive") from None
        if not isinstance(manifest, dict) or manifest.get("format") != "hkjit-bundle" \
                or not isinstance(manifest.get("entries"), list):
            raise BundleError(f"bundle {self.path}: {BUNDLE_MANIFEST} is not an hkjit bundle manifest")
        if manifest.get("version") != BUNDLE_FORMAT_VERSION:
            raise BundleError(f"bundle {self.path} has format {manifest.get('version')}, this hkjit reads "
                              f"{BUNDLE_FORMAT_VERSION}; rebuild it with this hkjit's `hkjit precompile`")
        problem = manifest_problem(manifest)
        if problem:
            raise BundleError(f"bundle {self.path}: {BUNDLE_MANIFEST} is malformed: {problem}. It was "
                              "damaged or edited after hkjit wrote it; rebuild it with `hkjit precompile`")
        if manifest.get("hkjit_version") != hkjit_version():
            warnings.warn(f"bundle {self.path} was built by hkjit {manifest.get('hkjit_version')}, this is "
                          f"hkjit {hkjit_version()}: its kernels will not match and will be compiled again "
                          "(rebuild the bundle with this version)", CacheWarning, stacklevel=3)
        return manifest


def manifest_problem(manifest: dict) -> str | None:
    """What is wrong with a manifest's fields (every one that hkjit uses), or None. Checked whole
    before anything in the bundle is used or imported."""
    if not isinstance(manifest.get("hkjit_version"), str):
        return "hkjit_version is not a string"
    if not isinstance(manifest.get("created", ""), str) or type(manifest.get("cache_format", 0)) is not int:
        return "created is not a string or cache_format is not an integer"
    seen = set()
    for n, record in enumerate(manifest["entries"]):
        problem = record_problem(record)
        if problem:
            return f"entry {n}: {problem}"
        if record["key"] in seen:
            return f"entry {n}: key {record['key']} is listed twice"
        seen.add(record["key"])
    toolchains = manifest.get("toolchains", [])
    if not isinstance(toolchains, list) or len(toolchains) > MAX_TOOLCHAINS:
        return f"toolchains is not a list of at most {MAX_TOOLCHAINS} toolchains"
    for n, toolchain in enumerate(toolchains):
        problem = toolchain_problem(toolchain)
        if problem:
            return f"toolchain {n}: {problem}"
    return None


def record_problem(record) -> str | None:
    if not isinstance(record, dict):
        return f"a {type(record).__name__}, not a record"
    key = record.get("key")
    if not isinstance(key, str) or len(key) != 64 or not _HEX.issuperset(key):
        return f"key {key!r} is not a cache key (64 lowercase hex digits)"
    if record.get("path") != entry_relpath(key):
        return f"path {record.get('path')!r} is not where key {key[:16]}… lives ({entry_relpath(key)})"
    size = record.get("size")
    if type(size) is not int or not 0 < size <= MAX_ENTRY_BYTES:
        return f"size {size!r} is not a byte count up to {MAX_ENTRY_BYTES}"
    digest = record.get("sha256")
    if not isinstance(digest, str) or len(digest) != 64 or not _HEX.issuperset(digest):
        return f"sha256 {digest!r} is not a sha256 hex digest"
    for field in ("op", "target"):
        if not isinstance(record.get(field, ""), str):
            return f"{field} is not a string"
    if not isinstance(record.get("params", {}), dict):
        return "params is not an object"
    return None


def toolchain_problem(toolchain) -> str | None:
    """Why `toolchain` is not {"target": str, "compiler": str, "flags": [str, ...] or null}."""
    if not isinstance(toolchain, dict):
        return f"a {type(toolchain).__name__}, not an object"
    if not isinstance(toolchain.get("target"), str) or not isinstance(toolchain.get("compiler"), str):
        return "target and compiler must be strings"
    flags = toolchain.get("flags")
    if flags is not None and not (isinstance(flags, list) and all(isinstance(f, str) for f in flags)):
        return "flags must be a list of strings"
    return None


def _zipmodule():
    """zipfile, imported when a zip bundle is first read: most runs have none (3-4 ms saved)."""
    import zipfile
    return zipfile


def _check_member_path(relpath: str, bundle: Path):
    # A tampered manifest must not make us read outside the bundle.
    p = PurePosixPath(relpath)
    if p.is_absolute() or ".." in p.parts or "\\" in relpath:
        raise BundleError(f"bundle {bundle}: manifest names an entry outside the bundle: {relpath!r}")
