"""What a built code object says about itself, read without any vendor tool.

AMD: the ELF's NT_AMDGPU_METADATA note (msgpack) gives registers, LDS, spills and the argument
list of each kernel. NVIDIA: ptxas's verbose report (both NVRTC and nvcc print it) gives
registers, shared memory and spills; cubins are also ELF files, so symbols are read the same way.
"""

import re
import struct
from dataclasses import dataclass

from .errors import HKJitError


class CodeObjectError(HKJitError, ValueError):
    """A code object is not the ELF file hkjit expected."""


@dataclass(frozen=True)
class Section:
    name: str
    type: int
    flags: int
    addr: int
    offset: int
    size: int
    info: int
    link: int
    entsize: int


def _sections(code: bytes) -> list[Section]:
    if len(code) < 64 or code[:4] != b"\x7fELF" or code[4] != 2 or code[5] != 1:
        raise CodeObjectError("not a 64-bit little-endian ELF code object")
    shoff, = struct.unpack_from("<Q", code, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", code, 0x3A)
    if shoff + shnum * shentsize > len(code):
        raise CodeObjectError("truncated ELF: section table past end of file")
    raw = [struct.unpack_from("<IIQQQQIIQQ", code, shoff + i * shentsize) for i in range(shnum)]
    names_off = raw[shstrndx][4]

    def name(off):
        end = code.index(b"\0", names_off + off)
        return code[names_off + off:end].decode()
    return [Section(name(r[0]), r[1], r[2], r[3], r[4], r[5], r[7], r[6], r[9]) for r in raw]


def sections(code: bytes) -> list[Section]:
    return _sections(code)


def symbols(code: bytes) -> dict[str, tuple[int, int, int]]:
    """Symbol name → (value, size, section index) for every named symbol."""
    secs = _sections(code)
    out = {}
    for sec in secs:
        if sec.type not in (2, 11):  # SHT_SYMTAB, SHT_DYNSYM
            continue
        strtab = secs[sec.link]
        for off in range(sec.offset, sec.offset + sec.size, 24):
            st_name, _info, _other, shndx, value, size = struct.unpack_from("<IBBHQQ", code, off)
            if st_name:
                start = strtab.offset + st_name
                out.setdefault(code[start:code.index(b"\0", start)].decode(), (value, size, shndx))
    return out


def notes(code: bytes) -> list[tuple[str, int, bytes]]:
    """(owner name, type, descriptor) of every note in every SHT_NOTE section."""
    out = []
    for sec in _sections(code):
        if sec.type != 7:
            continue
        pos, end = sec.offset, sec.offset + sec.size
        while pos + 12 <= end:
            namesz, descsz, ntype = struct.unpack_from("<III", code, pos)
            pos += 12
            name = code[pos:pos + namesz].rstrip(b"\0").decode()
            pos += (namesz + 3) & ~3
            out.append((name, ntype, code[pos:pos + descsz]))
            pos += (descsz + 3) & ~3
    return out


NT_AMDGPU_METADATA = 32


def amd_metadata(code: bytes) -> dict:
    """The whole AMDGPU metadata map (amdhsa.version, amdhsa.kernels, amdhsa.target, …)."""
    for name, ntype, desc in notes(code):
        if name == "AMDGPU" and ntype == NT_AMDGPU_METADATA:
            return _unpack_metadata(desc)
    raise CodeObjectError("no AMDGPU metadata note: not an AMD HSA code object")


def _unpack_metadata(desc: bytes) -> dict:
    import msgpack  # here, not at the top: `import hkjit` must not pay for it
    try:
        meta = msgpack.unpackb(desc, raw=False, strict_map_key=False)
    except msgpack.ExtraData as e:   # padding after the map: the map is what counts
        meta = e.unpacked
    except (ValueError, msgpack.UnpackException) as e:
        raise CodeObjectError(f"AMDGPU metadata note is not valid msgpack: {e}") from None
    if not isinstance(meta, dict):
        raise CodeObjectError(f"AMDGPU metadata note holds a {type(meta).__name__}, not a map")
    return meta


def amd_kernel_info(code: bytes, kernel: str) -> dict:
    """Static figures of one AMD kernel in hkjit's vocabulary, plus the raw metadata."""
    meta = amd_metadata(code)
    for k in meta.get("amdhsa.kernels", []):
        if k.get(".name") == kernel:
            vgprs, agprs = k.get(".vgpr_count", 0), k.get(".agpr_count", 0)
            return {
                "kernel": kernel,
                "target": meta.get("amdhsa.target", ""),
                "vgprs": vgprs,
                "agprs": agprs,
                "sgprs": k.get(".sgpr_count", 0),
                "lds_bytes": k.get(".group_segment_fixed_size", 0),
                "scratch_bytes": k.get(".private_segment_fixed_size", 0),
                "spills": k.get(".vgpr_spill_count", 0) + k.get(".sgpr_spill_count", 0),
                "vgpr_spills": k.get(".vgpr_spill_count", 0),
                "sgpr_spills": k.get(".sgpr_spill_count", 0),
                "kernarg_bytes": k.get(".kernarg_segment_size", 0),
                "wavefront_size": k.get(".wavefront_size", 64),
                "max_flat_workgroup_size": k.get(".max_flat_workgroup_size", 0),
                "waves_per_simd": amd_occupancy(vgprs, agprs),
                "args": k.get(".args", []),
            }
    names = [k.get(".name") for k in meta.get("amdhsa.kernels", [])]
    raise CodeObjectError(f"kernel {kernel!r} not in code object (it has {names})")


def amd_occupancy(vgprs: int, agprs: int) -> int:
    """Waves per SIMD that the unified VGPR file (512 per lane, allocated in granules of 8) allows
    on CDNA3/CDNA4; AGPRs start at a 4-aligned offset after the VGPRs. LDS is checked separately."""
    if agprs:
        total = ((vgprs + 3) // 4) * 4 + agprs
    else:
        total = vgprs
    total = max(8, ((total + 7) // 8) * 8)
    return max(0, min(8, 512 // total))


_PTXAS_REGS = re.compile(r"Used (\d+) registers")
_PTXAS_SPILL = re.compile(r"(\d+) bytes spill stores, (\d+) bytes spill loads")
_PTXAS_STACK = re.compile(r"(\d+) bytes stack frame")
_PTXAS_SMEM = re.compile(r"(\d+) bytes smem")


def nvidia_kernel_info(ptxas_log: str, kernel: str) -> dict:
    """Static figures from ptxas's verbose report for one kernel (the report names it)."""
    lines = ptxas_log.splitlines()
    start = next((i for i, l in enumerate(lines) if f"'{kernel}'" in l and "Compiling" in l), None)
    block = "\n".join(lines[start:start + 6] if start is not None else lines)
    regs = _PTXAS_REGS.search(block)
    spill = _PTXAS_SPILL.search(block)
    stack = _PTXAS_STACK.search(block)
    smem = _PTXAS_SMEM.search(block)
    return {
        "kernel": kernel,
        "registers": int(regs.group(1)) if regs else None,
        "smem_bytes": int(smem.group(1)) if smem else 0,
        "spills": (int(spill.group(1)) + int(spill.group(2))) if spill else 0,
        "stack_bytes": int(stack.group(1)) if stack else 0,
    }
