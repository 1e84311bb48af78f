"""Reading an AMDGPU code object: ELF sections and symbols, the kernel descriptor (`<name>.kd`),
and the metadata note (msgpack, code object v4/v5). Self-contained, so that the simulator needs
nothing but the bytes the compiler produced."""

import struct
from dataclasses import dataclass, field

from .errors import SimError


# ---------------------------------------------------------------- msgpack (the subset LLVM writes)
def _unpack(buf, i):
    b = buf[i]
    i += 1
    if b <= 0x7F:
        return b, i
    if b >= 0xE0:
        return b - 256, i
    if 0x80 <= b <= 0x8F:
        return _map(buf, i, b & 0x0F)
    if 0x90 <= b <= 0x9F:
        return _arr(buf, i, b & 0x0F)
    if 0xA0 <= b <= 0xBF:
        n = b & 0x1F
        return buf[i:i + n].decode(), i + n
    fixed = {0xCC: ">B", 0xCD: ">H", 0xCE: ">I", 0xCF: ">Q", 0xD0: ">b", 0xD1: ">h", 0xD2: ">i",
             0xD3: ">q", 0xCA: ">f", 0xCB: ">d"}
    if b in fixed:
        fmt = fixed[b]
        n = struct.calcsize(fmt)
        return struct.unpack_from(fmt, buf, i)[0], i + n
    if b == 0xC0:
        return None, i
    if b in (0xC2, 0xC3):
        return b == 0xC3, i
    if b in (0xD9, 0xDA, 0xDB, 0xC4, 0xC5, 0xC6):
        w = {0xD9: 1, 0xDA: 2, 0xDB: 4, 0xC4: 1, 0xC5: 2, 0xC6: 4}[b]
        n = int.from_bytes(buf[i:i + w], "big")
        i += w
        s = buf[i:i + n]
        return (s.decode() if b >= 0xD9 else bytes(s)), i + n
    if b in (0xDC, 0xDD):
        w = 2 if b == 0xDC else 4
        return _arr(buf, i + w, int.from_bytes(buf[i:i + w], "big"))
    if b in (0xDE, 0xDF):
        w = 2 if b == 0xDE else 4
        return _map(buf, i + w, int.from_bytes(buf[i:i + w], "big"))
    raise SimError(f"code object metadata: unsupported msgpack byte {b:#x}")


def _arr(buf, i, n):
    out = []
    for _ in range(n):
        v, i = _unpack(buf, i)
        out.append(v)
    return out, i


def _map(buf, i, n):
    out = {}
    for _ in range(n):
        k, i = _unpack(buf, i)
        v, i = _unpack(buf, i)
        out[k] = v
    return out, i


# ---------------------------------------------------------------- ELF
@dataclass
class Section:
    name: str
    type: int
    addr: int
    offset: int
    size: int


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
        if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
            raise SimError("not a 64-bit little-endian ELF code object (an offload bundle? build with "
                           "--no-gpu-bundle-output)")
        self.data = data
        shoff, = struct.unpack_from("<Q", data, 0x28)
        shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
        raw = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
        strtab = raw[shstrndx]
        def cstr(off, tab):
            end = data.index(b"\0", tab[4] + off)
            return data[tab[4] + off:end].decode()
        self.sections = [Section(cstr(r[0], strtab), r[1], r[3], r[4], r[5]) for r in raw]
        self.symbols = {}
        for i, r in enumerate(raw):
            if r[1] in (2, 11):  # SYMTAB, DYNSYM
                link = raw[r[6]]
                for j in range(r[5] // 24):
                    name, info, other, shndx, value, size = struct.unpack_from("<IBBHQQ", data, r[4] + j * 24)
                    if name:
                        self.symbols.setdefault(cstr(name, link), (value, size, shndx))
        self.metadata = self._metadata()

    def _metadata(self):
        for s in self.sections:
            if s.type != 7:  # SHT_NOTE
                continue
            i, end = s.offset, s.offset + s.size
            while i + 12 <= end:
                namesz, descsz, typ = struct.unpack_from("<III", self.data, i)
                name = self.data[i + 12:i + 12 + namesz].rstrip(b"\0")
                desc_off = i + 12 + (namesz + 3 & ~3)
                if name == b"AMDGPU" and typ == 32:  # NT_AMDGPU_METADATA
                    meta, _ = _unpack(self.data[desc_off:desc_off + descsz], 0)
                    return meta
                i = desc_off + (descsz + 3 & ~3)
        raise SimError("code object has no AMDGPU metadata note (code object v4+ expected)")

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
