"""The key index: specialisation id -> cache key shortcuts under root/index/ (see hkjit.jit.cache_key).

A record is one JSON object: the key, the compiler files' fingerprint, what the entry under that key
must say it is (`expect`: op, target, entry, params), the digest of the header contents the key was
computed from (`closure`) and the stamp of those header files (`stamp`: path, mtime, size, ctime,
inode, which may be empty), and a sha256 over the canonical JSON of all that. Records written before
`closure` and `stamp` existed are still whole records; a lookup never takes them. The checksum
catches damage (a torn or edited record is a miss: the key is computed again); it is not a
signature. A forged record with a valid checksum is caught one step later: the entry it
points at must match `expect` and the specialisation asked for (hkjit.jit checks both), so a record
naming another valid key never runs the other kernel."""

from __future__ import annotations

import hashlib
import json
import os
from contextlib import suppress
from pathlib import Path

from .entry import CorruptEntryError

INDEX_DIR = "index"
TEMP_SUFFIX = ".tmp"
_MAX_RECORD = 64 << 10   # a record is well under 4 KiB; a huge file there is not ours


class CorruptRecordError(ValueError):
    """An index record failed its checksum or is not an index record."""


def record_path(root, spec_id: str) -> Path:
    return Path(root) / INDEX_DIR / spec_id[:2] / spec_id


def _canonical(body: dict) -> bytes:
    return json.dumps(body, sort_keys=True, separators=(",", ":"), allow_nan=False).encode()


_FIELDS = ("key", "fingerprint", "expect")
_WARM_FIELDS = ("closure", "stamp")     # optional: see the module docstring


def encode_record(key: str, fingerprint, expect: dict, closure: str | None = None, stamp=None) -> bytes:
    body = {"key": key, "fingerprint": fingerprint, "expect": expect}
    if closure is not None:
        body.update(closure=closure, stamp=list(stamp or ()))
    return _canonical({**body, "sha256": hashlib.sha256(_canonical(body)).hexdigest()})


def decode_record(blob: bytes) -> dict:
    """The record's fields (key, fingerprint, expect); CorruptRecordError if it is not one whole."""
    try:
        record = json.loads(blob)
    except ValueError as e:
        raise CorruptRecordError(f"not JSON: {e}") from None
    if not isinstance(record, dict) or set(record) - set(_WARM_FIELDS) != {*_FIELDS, "sha256"} \
            or len(set(record) & set(_WARM_FIELDS)) == 1:
        raise CorruptRecordError("not an index record (fields missing or unknown)")
    body = {k: v for k, v in record.items() if k != "sha256"}
    try:
        digest = hashlib.sha256(_canonical(body)).hexdigest()
    except (TypeError, ValueError):
        raise CorruptRecordError("not an index record") from None
    if digest != record["sha256"]:
        raise CorruptRecordError("checksum mismatch: the record was damaged or edited after it was written")
    if not isinstance(body["fingerprint"], list) or not isinstance(body["expect"], dict) \
            or not isinstance(body.get("closure", ""), str) or not isinstance(body.get("stamp", []), list):
        raise CorruptRecordError("not an index record (wrong field types)")
    return body


def read_record(path: Path) -> dict | None:
    """The record in `path`, None when there is none; CorruptRecordError when it is bad.
    Never follows a link (another user could point one at anything)."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as e:
        raise CorruptRecordError(f"unreadable: {e}") from None
    with os.fdopen(fd, "rb") as f:
        blob = f.read(_MAX_RECORD + 1)
    if len(blob) > _MAX_RECORD:
        raise CorruptRecordError(f"larger than {_MAX_RECORD} bytes")
    return decode_record(blob)


def write_record(root, spec_id: str, key: str, fingerprint, expect: dict, mkdirs, *, closure: str | None = None,
                 stamp=None) -> None:
    """Write a record whole (temp file + rename; the temp file is removed on any failure, a full
    disk included). `mkdirs(relative)` creates the cache's folders (0700). OSError propagates."""
    path = record_path(root, spec_id)
    mkdirs(path.parent.relative_to(root))
    blob = encode_record(key, fingerprint, expect, closure, stamp)
    import secrets   # here: a warm start only reads records
    tmp = path.with_name(f".{spec_id}.{os.getpid()}.{secrets.token_hex(4)}{TEMP_SUFFIX}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(blob)
        os.replace(tmp, path)
    except BaseException:
        with suppress(OSError):
            os.unlink(tmp)
        raise


def remove_record(path: Path) -> None:
    with suppress(OSError):
        os.unlink(path)


def record_files(root) -> list[Path]:
    base = Path(root) / INDEX_DIR
    try:
        return sorted(p for p in base.glob("*/*") if not p.name.endswith(TEMP_SUFFIX))
    except OSError:
        return []


def expectation_problem(expect: dict, meta: dict) -> str | None:
    """Why an entry's metadata does not match what its index record (or the caller) expects."""
    for field, wanted in expect.items():
        if meta.get(field) != wanted:
            return f"the entry's {field} is {meta.get(field)!r}, expected {wanted!r}"
    return None


def verify_records(root, load_entry) -> list[tuple[Path, str]]:
    """(path, problem) for every bad record: one that fails its checksum, or names an entry that is
    not what the record expects. `load_entry(key)` gives the entry under `key` (FileNotFoundError:
    pruned, the record is merely stale; an entry that fails its own checks is reported by the
    entries' verification, not here). Bad records are removed: they are only shortcuts."""
    problems = []
    for path in record_files(root):
        try:
            record = read_record(path)
            if record is None:
                continue
            problem = None
            with suppress(FileNotFoundError):
                problem = expectation_problem(record["expect"], load_entry(record["key"]).meta)
                if problem:
                    problem = f"names the entry of key {record['key']}, but {problem}"
        except CorruptEntryError:
            continue   # the entry failing its own checks is reported (and set aside) with the entries
        except (CorruptRecordError, ValueError) as e:   # ValueError: not a cache key
            problem = str(e)
        except OSError:
            continue
        if problem:
            problems.append((path, f"key index record: {problem}"))
            remove_record(path)
    return problems
