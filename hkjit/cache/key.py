"""Cache keys and where their files live: a key is the sha256 of a kernel's canonical key parts."""

import hashlib
import json
import re

from ..errors import InvalidArgumentError

CACHE_FORMAT_VERSION = 1    # part of every key and every entry header: bump it and old entries stop matching
ENTRY_SUFFIX = ".hkc"

_KEY_RE = re.compile(r"^[0-9a-f]{16,128}$")
_FORMAT_PART = "hkjit_cache_format"


def make_key(parts: dict) -> str:
    """sha256 (hex) of the canonical JSON of `parts` plus the cache format version.

    Canonical = sorted keys, no whitespace, ASCII only, so the same parts give the same key in
    every process, Python version and locale."""
    if not isinstance(parts, dict):
        raise InvalidArgumentError(f"make_key takes a dict of key parts, got {type(parts).__name__}")
    if _FORMAT_PART in parts:
        raise InvalidArgumentError(f"key part {_FORMAT_PART!r} is reserved for the cache itself")
    try:
        text = json.dumps({**parts, _FORMAT_PART: CACHE_FORMAT_VERSION}, sort_keys=True,
                          separators=(",", ":"), ensure_ascii=True, allow_nan=False)
    except (TypeError, ValueError) as e:
        raise InvalidArgumentError(f"cache key parts must be plain JSON values (str, int, float, bool, "
                                   f"None, lists, dicts with str keys): {e}") from None
    return hashlib.sha256(text.encode("ascii")).hexdigest()


def check_key(key) -> str:
    """A key is lowercase hex; anything else (a path separator above all) never reaches the disk."""
    if not isinstance(key, str) or not _KEY_RE.match(key):
        raise InvalidArgumentError(f"not a cache key: {key!r} (expected the hex string make_key returns)")
    return key


def entry_relpath(key: str) -> str:
    """Where an entry lives, relative to a cache root or a bundle: entries/<key[:2]>/<key>.hkc."""
    return f"entries/{key[:2]}/{key}{ENTRY_SUFFIX}"


def lock_relpath(key: str) -> str:
    """The file flock'd while one process compiles `key`, relative to a cache root."""
    return f"locks/{key}.lock"
