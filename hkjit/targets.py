"""Compile targets: parsing, validation and the per-chip limits that tile validation checks.

A target string is `gfx942`, `gfx950` (optionally with features: `gfx942:sramecc+:xnack-`) or
`sm_90a`. The full string, features included, is part of every cache key."""

from __future__ import annotations

import re

from .errors import TargetError
from .values import Frozen


class Target(Frozen):
    """A compile target: `arch` ("gfx942", "gfx950", "sm_90a") and `features` (AMD target features,
    e.g. ("sramecc+", "xnack-")) say which; the rest are the chip's limits. Targets are equal
    when arch and features are."""
    __slots__ = ("arch", "features", "vendor", "wave_size", "smem_per_block", "max_threads", "regs_per_thread",
                 "regs_per_block", "compute_units")
    _compare = ("arch", "features")

    def __init__(self, arch: str, features: tuple = (), vendor: str = "", wave_size: int = 32,
                 smem_per_block: int = 0, max_threads: int = 1024, regs_per_thread: int = 255,
                 regs_per_block: int = 0, compute_units: int = 0):
        # smem_per_block: LDS / shared memory a block may use; regs_per_thread: VGPR+AGPR on CDNA;
        # regs_per_block: 32-bit registers a block may hold (NVIDIA); compute_units: CUs / SMs of
        # the flagship part
        self._set(arch=arch, features=features, vendor=vendor, wave_size=wave_size, smem_per_block=smem_per_block,
                  max_threads=max_threads, regs_per_thread=regs_per_thread, regs_per_block=regs_per_block,
                  compute_units=compute_units)

    @property
    def id(self) -> str:
        return ":".join((self.arch,) + self.features)

    @property
    def is_amd(self) -> bool:
        return self.vendor == "amd"

    @property
    def is_nvidia(self) -> bool:
        return self.vendor == "nvidia"

    def __str__(self):
        return self.id


_ARCHS = {
    "gfx942": dict(vendor="amd", wave_size=64, smem_per_block=64 * 1024, max_threads=1024,
                   regs_per_thread=512, compute_units=304),
    "gfx950": dict(vendor="amd", wave_size=64, smem_per_block=160 * 1024, max_threads=1024,
                   regs_per_thread=512, compute_units=256),
    "sm_90a": dict(vendor="nvidia", wave_size=32, smem_per_block=227 * 1024, max_threads=1024,
                   regs_per_thread=255, regs_per_block=65536, compute_units=132),
}
SUPPORTED = tuple(_ARCHS)
_FEATURE = re.compile(r"^(sramecc|xnack)[+-]$")


def parse(value) -> Target:
    """Target from a string such as 'gfx950', 'gfx942:sramecc+:xnack-' or 'sm_90a'."""
    if isinstance(value, Target):
        return value
    if not isinstance(value, str) or not value:
        raise TargetError(f"target must be a string such as 'gfx950' or 'sm_90a', got {value!r}")
    arch, *features = value.strip().split(":")
    if arch == "sm_90":
        arch = "sm_90a"  # Hopper kernels need the arch-specific target (wgmma, setmaxnreg)
    if arch not in _ARCHS:
        raise TargetError(f"unsupported target {value!r}; supported targets: {', '.join(SUPPORTED)}"
                          " (AMD targets accept features, e.g. 'gfx942:sramecc+:xnack-')")
    if features and _ARCHS[arch]["vendor"] != "amd":
        raise TargetError(f"target {value!r}: features are only meaningful for AMD targets")
    seen = {}
    for f in features:
        if not _FEATURE.match(f):
            raise TargetError(f"target {value!r}: unknown feature {f!r}; use sramecc+/- or xnack+/-")
        if f[:-1] in seen:
            raise TargetError(f"target {value!r}: feature {f[:-1]} is given twice ({seen[f[:-1]]}, {f}); "
                              "give each of sramecc and xnack at most once, with + or -")
        seen[f[:-1]] = f
    # One spelling per target (LLVM's order: sramecc before xnack), so one key per kernel.
    return Target(arch, tuple(sorted(features)), **_ARCHS[arch])


def from_gcn_arch_name(name: str) -> Target:
    """Target from HIP's gcnArchName, e.g. 'gfx942:sramecc+:xnack-'."""
    return parse(name)


def from_compute_capability(major: int, minor: int) -> Target:
    if (major, minor) == (9, 0):
        return parse("sm_90a")
    raise TargetError(f"NVIDIA compute capability {major}.{minor} is not supported; hkjit's NVIDIA "
                      "kernels need Hopper (sm_90a, compute capability 9.0)")
