"""Reading bundles: read-only sets of precompiled entries (a directory or a .zip) listed by a
manifest that holds every entry's size and sha256. hkjit.deploy writes them; this module only reads."""

import hashlib
import json
import os
import threading
import warnings
import zipfile
from contextlib import suppress
from pathlib import Path, PurePosixPath

from ..errors import BundleError, CacheWarning
from .entry import CorruptEntryError, Entry, decode_entry, hkjit_version

BUNDLE_MANIFEST = "hkjit-bundle.json"
BUNDLE_FORMAT_VERSION = 1


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
            blob = self.read_member(record["path"])
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

    def read_member(self, relpath: str) -> bytes:
        _check_member_path(relpath, self.path)
        try:
            if self._is_zip():
                with self._mutex:
                    return self._zipfile().read(relpath)
            return (self.path / relpath).read_bytes()
        except (OSError, KeyError, zipfile.BadZipFile) as e:
            raise BundleError(f"bundle {self.path}: cannot read {relpath}: {e}; the bundle is incomplete, "
                              "rebuild or re-copy it") from None

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

    def _zipfile(self) -> zipfile.ZipFile:
        if self._zip is None:
            self._zip = zipfile.ZipFile(self.path)
        return self._zip

    def _load_manifest(self) -> dict:
        self._loaded_stamp = self._stamp()
        if not self.path.exists():
            raise BundleError(f"bundle {self.path} does not exist; fix HKJIT_BUNDLE_PATH or copy the bundle there")
        try:
            manifest = json.loads(self.read_member(BUNDLE_MANIFEST))
        except ValueError as e:
            raise BundleError(f"bundle {self.path}: {BUNDLE_MANIFEST} is not JSON ({e}); rebuild the bundle") from None
        except zipfile.BadZipFile:
            raise BundleError(f"bundle {self.path} is a file but not a zip archive") from None
        _check_manifest_shape(self.path, manifest)
        if manifest.get("format") != "hkjit-bundle" or not isinstance(manifest.get("entries"), list):
            raise BundleError(f"bundle {self.path}: {BUNDLE_MANIFEST} is not an hkjit bundle manifest")
        if manifest.get("version") != BUNDLE_FORMAT_VERSION:
            raise BundleError(f"bundle {self.path} has format {manifest.get('version')}, this hkjit reads "
                              f"{BUNDLE_FORMAT_VERSION}; rebuild it with this hkjit's `hkjit precompile`")
        if manifest.get("hkjit_version") != hkjit_version():
            warnings.warn(f"bundle {self.path} was built by hkjit {manifest.get('hkjit_version')}, this is "
                          f"hkjit {hkjit_version()}: its kernels will not match and will be compiled again "
                          "(rebuild the bundle with this version)", CacheWarning, stacklevel=3)
        return manifest


def _check_manifest_shape(bundle: Path, manifest) -> None:
    """A malformed manifest is a BundleError on every use (never a silent skip: a bundle someone
    put on HKJIT_BUNDLE_PATH and that ships nothing must be noticed)."""
    def bad(what):
        raise BundleError(f"bundle {bundle}: {BUNDLE_MANIFEST} is not an hkjit bundle manifest ({what}); "
                          "rebuild it with `hkjit precompile` or take it off HKJIT_BUNDLE_PATH")
    if not isinstance(manifest, dict):
        bad(f"a JSON {type(manifest).__name__}, not an object")
    entries, toolchains = manifest.get("entries"), manifest.get("toolchains", [])
    if not isinstance(entries, list) or not isinstance(toolchains, list):
        bad("'entries' and 'toolchains' must be lists")
    for record in entries:
        if not isinstance(record, dict) or not all(isinstance(record.get(k), str) for k in ("key", "path")):
            bad(f"entry record {str(record)[:80]!r} lacks a string 'key' and 'path'")
    for toolchain in toolchains:
        if not isinstance(toolchain, dict):
            bad(f"toolchain record {str(toolchain)[:80]!r} is not an object")


def _check_member_path(relpath: str, bundle: Path):
    # A tampered manifest must not make us read outside the bundle.
    p = PurePosixPath(relpath)
    if p.is_absolute() or ".." in p.parts or "\\" in relpath:
        raise BundleError(f"bundle {bundle}: manifest names an entry outside the bundle: {relpath!r}")


def bundle_paths_from_env() -> list[str]:
    value = os.environ.get("HKJIT_BUNDLE_PATH", "")
    return [p for p in value.split(os.pathsep) if p]
