"""Reading an AMDGPU code object for execution: the kernel descriptor (`<name>.kd`), the entry
point and the code, on top of hkjit.codeobj's ELF and metadata reader, so that the simulator needs
nothing but the bytes the compiler produced."""

import struct
from dataclasses import dataclass, field

from .. import codeobj
from .errors import SimError


@dataclass
class KernelDescriptor:
    group_segment_fixed_size: int
    private_segment_fixed_size: int
    kernarg_size: int
    entry_offset: int          # from the descriptor's address
    rsrc1: int
    rsrc2: int
    rsrc3: int
    properties: int
    kernarg_preload: int

    @classmethod
    def parse(cls, raw: bytes):
        if len(raw) != 64:
            raise SimError(f"kernel descriptor is {len(raw)} bytes, expected 64")
        g, p, k = struct.unpack_from("<III", raw, 0)
        entry, = struct.unpack_from("<q", raw, 16)
        rsrc3, rsrc1, rsrc2 = struct.unpack_from("<III", raw, 44)
        props, preload = struct.unpack_from("<HH", raw, 56)
        return cls(g, p, k, entry, rsrc1, rsrc2, rsrc3, props, preload)

    # user SGPRs in descriptor order: (property bit, name, count)
    _USER_SGPRS = ((0, "private_segment_buffer", 4), (1, "dispatch_ptr", 2), (2, "queue_ptr", 2),
                   (3, "kernarg_segment_ptr", 2), (4, "dispatch_id", 2), (5, "flat_scratch_init", 2),
                   (6, "private_segment_size", 1))

    def user_sgprs(self):
        """[(name, first sgpr, count)] in the order the hardware loads them."""
        out, s = [], 0
        for bit, name, n in self._USER_SGPRS:
            if self.properties >> bit & 1:
                out.append((name, s, n))
                s += n
        return out

    @property
    def user_sgpr_count(self):
        return self.rsrc2 >> 1 & 0x1F

    @property
    def enable_private_segment(self):
        return bool(self.rsrc2 & 1)

    @property
    def workgroup_id_enabled(self):
        return tuple(bool(self.rsrc2 >> b & 1) for b in (7, 8, 9))

    @property
    def workitem_id_dims(self):
        return (self.rsrc2 >> 11 & 3) + 1

    @property
    def accum_offset(self):
        """First AGPR of the unified register file (gfx90a+), in registers."""
        return ((self.rsrc3 & 0x3F) + 1) * 4

    @property
    def wave32(self):
        return bool(self.properties >> 10 & 1)

    @property
    def preload_length(self):
        return self.kernarg_preload & 0x7F

    @property
    def preload_offset(self):
        return self.kernarg_preload >> 7


@dataclass
class Kernel:
    name: str
    code: bytes                     # the whole .text section (device functions may sit before the entry)
    text_addr: int                  # virtual address of .text
    entry_addr: int                 # virtual address of the entry point in the object
    descriptor: KernelDescriptor
    meta: dict                      # this kernel's entry of amdhsa.kernels
    target: str                     # e.g. "amdgcn-amd-amdhsa--gfx950"
    code_object: bytes = field(repr=False, default=b"")


class CodeObject:
    def __init__(self, data: bytes):
        data = bytes(data)
        try:
            self.sections = codeobj.sections(data)
            self.symbols = codeobj.symbols(data)
            self.metadata = codeobj.amd_metadata(data)
        except codeobj.CodeObjectError as e:
            raise SimError(f"{e} (an offload bundle? build with --no-gpu-bundle-output; code object v4+ "
                           "expected)") from None
        self.data = data

    def vaddr_bytes(self, addr, size):
        for s in self.sections:
            if s.type != 8 and s.addr <= addr and addr + size <= s.addr + s.size:  # not NOBITS
                return self.data[s.offset + addr - s.addr:s.offset + addr - s.addr + size]
        raise SimError(f"address {addr:#x}+{size} is in no section of the code object")

    def kernel_names(self):
        return [k[".name"] for k in self.metadata.get("amdhsa.kernels", [])]

    def kernel(self, name) -> Kernel:
        metas = {k[".name"]: k for k in self.metadata.get("amdhsa.kernels", [])}
        if name not in metas:
            raise SimError(f"kernel {name!r} is not in the code object (it has: {', '.join(metas) or 'none'})")
        meta = metas[name]
        kd_sym = meta.get(".symbol", name + ".kd")
        if kd_sym not in self.symbols:
            raise SimError(f"kernel descriptor symbol {kd_sym!r} missing", kernel=name)
        kd_addr, _, _ = self.symbols[kd_sym]
        kd = KernelDescriptor.parse(self.vaddr_bytes(kd_addr, 64))
        entry = kd_addr + kd.entry_offset
        text = next((s for s in self.sections if s.name == ".text"), None)
        if text is None or not text.addr <= entry < text.addr + text.size:
            raise SimError("kernel entry point is outside .text", kernel=name)
        code = self.vaddr_bytes(text.addr, text.size)
        return Kernel(name, code, text.addr, entry, kd, meta, self.metadata.get("amdhsa.target", ""), self.data)
