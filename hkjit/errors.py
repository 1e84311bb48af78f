"""hkjit's exceptions. Every error hkjit raises is an HKJitError; where Python convention expects
a builtin type (a bad value, a wrong type, a missing tool) the class derives from that too, so
`except ValueError` keeps working for callers who do not know hkjit."""


class HKJitError(Exception):
    """Base class of every error hkjit raises."""


class InvalidArgumentError(HKJitError, ValueError):
    """A call's argument has the wrong value: shapes, strides, tile overrides, keywords."""


class DTypeError(HKJitError, TypeError):
    """An array has a dtype the op does not accept."""


class UnsupportedArrayError(HKJitError, TypeError):
    """An object is not an array hkjit can read (no DLPack, no known framework)."""


class DeviceError(HKJitError, RuntimeError):
    """No usable device, arrays on different devices, or a runtime call failed."""


class TargetError(HKJitError, ValueError):
    """An unknown or unsupported compile target."""


class CompilerNotFoundError(HKJitError, RuntimeError):
    """No compiler for the target could be found (or the requested one is missing)."""


class CompileError(HKJitError, RuntimeError):
    """The compiler rejected a kernel. Carries its diagnostics, command and source path."""

    def __init__(self, message, *, log="", command=None, source_path=None):
        self.log = log
        self.command = command
        self.source_path = source_path
        parts = [message]
        if command:
            parts.append("command: " + " ".join(str(c) for c in command))
        if source_path:
            parts.append(f"generated source: {source_path}")
        if log:
            parts.append("compiler output:\n" + log.strip())
        super().__init__("\n".join(parts))


class CacheError(HKJitError, RuntimeError):
    """The on-disk cache could not be used (lock timeout, unreadable entry that cannot be rebuilt)."""


class UnsafeCacheError(CacheError):
    """The cache folder (or its entries/) can be written by another user: world-writable or owned by
    someone else. hkjit refuses it, as ssh refuses such a ~/.ssh, since anyone who can write there
    can make this process run their code."""


class CacheWarning(UserWarning):
    """The cache could not be used as configured; hkjit carries on (in memory, or without an entry)."""


class OfflineMissError(HKJitError, RuntimeError):
    """Offline mode is on and the specialisation is in no bundle and not in the cache."""


class BundleError(HKJitError, RuntimeError):
    """A precompiled bundle is malformed or was tampered with."""


class LaunchError(HKJitError, RuntimeError):
    """A kernel could not be loaded or launched."""


class InvalidImageError(LaunchError):
    """The runtime rejected a code object (corrupt, or built for another device): the JIT sets the
    cached copy aside and compiles the kernel again."""


class GraphCaptureError(LaunchError):
    """A call would compile, load a kernel or allocate device memory while its stream captures a CUDA
    graph: run it once with the same shapes before capturing."""
