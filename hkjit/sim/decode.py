"""Binary decoder for the GFX9-family encodings used by gfx942 (CDNA3) and gfx950 (CDNA4).

`decode(code, offset, arch)` returns one `Inst`: the family, opcode, mnemonic (from the tables in
_opcodes.py, generated from LLVM's disassembler) and the raw fields of the encoding. Operand
meaning is left to the executor, which knows each instruction's operand types."""

import struct

from ._opcodes import GFX942, GFX950_CHANGES, TRAILING_LITERAL
from .errors import SimUnsupportedInstruction


def _apply(base, changes):
    out = {fam: dict(ops) for fam, ops in base.items()}
    for fam, ops in changes.items():
        table = out.setdefault(fam, {})
        for op, name in ops.items():
            if name is None:
                table.pop(op, None)
            else:
                table[op] = name
    return out


def _with_vopc_in_vop3(table):
    """VOP3's opcodes 0x000-0x0ff are the VOPC ones in the 64-bit form; the generated tables leave them
    out of VOP3 (the generator checks that they are exactly VOPC's)."""
    return {**table, "VOP3": {**table["VOPC"], **table["VOP3"]}}


# encoding family -> opcode -> mnemonic, per target (gfx950 is stored as its changes to gfx942)
OPCODES = {"gfx942": _with_vopc_in_vop3(GFX942), "gfx950": _with_vopc_in_vop3(_apply(GFX942, GFX950_CHANGES))}

# VOP3 opcode ranges holding the promoted VOPC / VOP2 / VOP1 instructions
VOP3_VOP2_BASE, VOP3_VOP1_BASE = 0x100, 0x140

# 9-bit source operand names, for messages
_SPECIAL = {102: "flat_scratch_lo", 103: "flat_scratch_hi", 104: "xnack_mask_lo", 105: "xnack_mask_hi",
            106: "vcc_lo", 107: "vcc_hi", 124: "m0", 126: "exec_lo", 127: "exec_hi", 235: "src_shared_base",
            236: "src_shared_limit", 237: "src_private_base", 238: "src_private_limit",
            239: "src_pops_exiting_wave_id", 240: "0.5", 241: "-0.5", 242: "1.0", 243: "-1.0", 244: "2.0",
            245: "-2.0", 246: "4.0", 247: "-4.0", 248: "0.15915494", 249: "sdwa", 250: "dpp", 251: "vccz",
            252: "execz", 253: "scc", 254: "lds_direct", 255: "literal"}


def src_name(v, literal=None):
    if v < 102:
        return f"s{v}"
    if 108 <= v <= 123:
        return f"ttmp{v - 108}"
    if 128 <= v <= 192:
        return str(v - 128)
    if 193 <= v <= 208:
        return str(192 - v)
    if v >= 256:
        return f"v{v - 256}"
    if v == 255 and literal is not None:
        return f"{literal:#x}"
    return _SPECIAL.get(v, f"src{v}")


class Inst:
    __slots__ = ("addr", "size", "fam", "op", "name", "f", "words", "sub")

    def __init__(self, addr, size, fam, op, name, f, words, sub=None):
        self.addr, self.size, self.fam, self.op, self.name = addr, size, fam, op, name
        self.f, self.words, self.sub = f, words, sub  # sub: 'dpp' / 'sdwa' / None

    def text(self):
        f = self.f
        parts = []
        for k in ("vdst", "sdst", "sdata", "vdata", "src0", "src1", "src2", "ssrc0", "ssrc1", "addr",
                  "vaddr", "data0", "data1", "sbase", "srsrc", "saddr", "soffset", "offset", "offset0",
                  "offset1", "simm16"):
            if k in f:
                v = f[k]
                if k in ("src0", "src1", "src2", "ssrc0", "ssrc1", "soffset"):
                    v = src_name(v, f.get("literal"))
                elif k in ("vdst", "vdata", "addr", "vaddr", "data0", "data1"):
                    v = f"v{v}"
                elif k in ("sdst", "sdata", "sbase", "srsrc", "saddr"):
                    v = f"s{v}"
                parts.append(f"{k}={v}")
        name = self.name + (f"_{self.sub}" if self.sub else "")
        hexw = " ".join(f"{w:08X}" for w in self.words)
        return f"{name} {', '.join(parts)}  [{hexw}]"

    def __repr__(self):
        return f"<Inst +{self.addr:#x} {self.text()}>"


def _name(arch, fam, op, addr, words, kernel):
    name = OPCODES[arch][fam].get(op)
    if name is None:
        raise SimUnsupportedInstruction(
            f"unknown {fam} opcode {op:#x} (encoding {' '.join(f'{w:08X}' for w in words)}) for {arch}",
            kernel=kernel, pc=addr)
    return name


def decode(code: bytes, addr: int, arch: str, kernel=None) -> Inst:
    if addr + 4 > len(code):
        raise SimUnsupportedInstruction("program counter ran past the end of the code", kernel=kernel, pc=addr)
    w0, = struct.unpack_from("<I", code, addr)

    def word(i):
        if addr + 4 * i + 4 > len(code):
            raise SimUnsupportedInstruction("truncated instruction", kernel=kernel, pc=addr)
        return struct.unpack_from("<I", code, addr + 4 * i)[0]

    top9, top6 = w0 >> 23, w0 >> 26
    # ---------------------------------------------------------------- scalar
    if w0 >> 30 == 2:
        if top9 == 0x17F:
            op = w0 >> 16 & 0x7F
            f = {"simm16": w0 & 0xFFFF}
            return Inst(addr, 4, "SOPP", op, _name(arch, "SOPP", op, addr, [w0], kernel), f, [w0])
        if top9 == 0x17D:
            fam, op, f = "SOP1", w0 >> 8 & 0xFF, {"sdst": w0 >> 16 & 0x7F, "ssrc0": w0 & 0xFF}
        elif top9 == 0x17E:
            fam, op, f = "SOPC", w0 >> 16 & 0x7F, {"ssrc0": w0 & 0xFF, "ssrc1": w0 >> 8 & 0xFF}
        elif w0 >> 28 == 0xB:
            op = w0 >> 23 & 0x1F
            f = {"sdst": w0 >> 16 & 0x7F, "simm16": w0 & 0xFFFF}
            name = _name(arch, "SOPK", op, addr, [w0], kernel)
            if op in TRAILING_LITERAL[arch].get("SOPK", ()):
                f["literal"] = word(1)
                return Inst(addr, 8, "SOPK", op, name, f, [w0, f["literal"]])
            return Inst(addr, 4, "SOPK", op, name, f, [w0])
        else:
            fam, op = "SOP2", w0 >> 23 & 0x7F
            f = {"sdst": w0 >> 16 & 0x7F, "ssrc0": w0 & 0xFF, "ssrc1": w0 >> 8 & 0xFF}
        name = _name(arch, fam, op, addr, [w0], kernel)
        if f.get("ssrc0") == 255 or f.get("ssrc1") == 255:
            f["literal"] = word(1)
            return Inst(addr, 8, fam, op, name, f, [w0, f["literal"]])
        return Inst(addr, 4, fam, op, name, f, [w0])
    # ---------------------------------------------------------------- vector, 32-bit encodings
    if w0 >> 31 == 0:
        if w0 >> 25 == 0x3F:
            fam, op = "VOP1", w0 >> 9 & 0xFF
            f = {"vdst": w0 >> 17 & 0xFF, "src0": w0 & 0x1FF}
        elif w0 >> 25 == 0x3E:
            fam, op = "VOPC", w0 >> 17 & 0xFF
            f = {"src0": w0 & 0x1FF, "vsrc1": w0 >> 9 & 0xFF}
        else:
            fam, op = "VOP2", w0 >> 25 & 0x3F
            f = {"vdst": w0 >> 17 & 0xFF, "src0": w0 & 0x1FF, "vsrc1": w0 >> 9 & 0xFF}
        name = _name(arch, fam, op, addr, [w0], kernel)
        s0 = f["src0"]
        if s0 == 0xFF or op in TRAILING_LITERAL[arch].get(fam, ()):   # v_fmamk_f32 & co. always take one
            f["literal"] = word(1)
            return Inst(addr, 8, fam, op, name, f, [w0, f["literal"]])
        if s0 == 0xFA:  # DPP
            w1 = word(1)
            f.update(src0=256 + (w1 & 0xFF), dpp_ctrl=w1 >> 8 & 0x1FF, bound_ctrl=w1 >> 19 & 1,
                     neg=(w1 >> 20 & 1) | (w1 >> 22 & 1) << 1, abs=(w1 >> 21 & 1) | (w1 >> 23 & 1) << 1,
                     bank_mask=w1 >> 24 & 0xF, row_mask=w1 >> 28 & 0xF)
            return Inst(addr, 8, fam, op, name, f, [w0, w1], "dpp")
        if s0 == 0xF9:  # SDWA
            w1 = word(1)
            f.update(src0=(w1 & 0xFF) + (0 if w1 >> 23 & 1 else 256),
                     src0_sel=w1 >> 16 & 7, src0_sext=w1 >> 19 & 1,
                     neg=(w1 >> 20 & 1) | (w1 >> 28 & 1) << 1, abs=(w1 >> 21 & 1) | (w1 >> 29 & 1) << 1,
                     src1_sel=w1 >> 24 & 7, src1_sext=w1 >> 27 & 1, src1_sgpr=w1 >> 31 & 1)
            if fam == "VOPC":
                f["sdst"] = (w1 >> 8 & 0x7F) if w1 >> 15 & 1 else 106
                f["omod"], f["clamp"] = 0, 0
            else:
                f.update(dst_sel=w1 >> 8 & 7, dst_unused=w1 >> 11 & 3, clamp=w1 >> 13 & 1, omod=w1 >> 14 & 3)
            return Inst(addr, 8, fam, op, name, f, [w0, w1], "sdwa")
        return Inst(addr, 4, fam, op, name, f, [w0])
    # ---------------------------------------------------------------- 64-bit encodings
    w1 = word(1)
    words = [w0, w1]
    if top9 == 0x1A7:  # VOP3P (incl. MAI)
        op = w0 >> 16 & 0x7F
        if op == 0x2C and arch == "gfx950":  # v_mfma_ld_scale_b32: prefix of a scaled MFMA
            f = {"src0": w1 & 0x1FF, "src1": w1 >> 9 & 0x1FF, "op_sel": w0 >> 11 & 7,
                 "op_sel_hi": (w1 >> 27 & 3) | (w0 >> 14 & 1) << 2}
            return Inst(addr, 8, "VOP3P", op, "v_mfma_ld_scale_b32", f, words)
        name = _name(arch, "VOP3P", op, addr, words, kernel)
        if "mfma" in name or "smfmac" in name:
            f = {"vdst": w0 & 0xFF, "cbsz": w0 >> 8 & 7, "abid": w0 >> 11 & 0xF, "acc_cd": w0 >> 15 & 1,
                 "src0": w1 & 0x1FF, "src1": w1 >> 9 & 0x1FF, "src2": w1 >> 18 & 0x1FF,
                 "acc": w1 >> 27 & 3, "blgp": w1 >> 29 & 7}
        else:
            f = {"vdst": w0 & 0xFF, "neg_hi": w0 >> 8 & 7, "op_sel": w0 >> 11 & 7,
                 "op_sel_hi": (w1 >> 27 & 3) | (w0 >> 14 & 1) << 2, "clamp": w0 >> 15 & 1,
                 "src0": w1 & 0x1FF, "src1": w1 >> 9 & 0x1FF, "src2": w1 >> 18 & 0x1FF, "neg": w1 >> 29 & 7}
        return Inst(addr, 8, "VOP3P", op, name, f, words)
    if top6 == 0x34:  # VOP3
        op = w0 >> 16 & 0x3FF
        name = _name(arch, "VOP3", op, addr, words, kernel)
        f = {"vdst": w0 & 0xFF, "abs": w0 >> 8 & 7, "sdst": w0 >> 8 & 0x7F, "op_sel": w0 >> 11 & 0xF,
             "clamp": w0 >> 15 & 1, "src0": w1 & 0x1FF, "src1": w1 >> 9 & 0x1FF, "src2": w1 >> 18 & 0x1FF,
             "omod": w1 >> 27 & 3, "neg": w1 >> 29 & 7}
        return Inst(addr, 8, "VOP3", op, name, f, words)
    if top6 == 0x30:  # SMEM
        op = w0 >> 18 & 0xFF
        name = _name(arch, "SMEM", op, addr, words, kernel)
        imm, soe = w0 >> 17 & 1, w0 >> 14 & 1
        f = {"sbase": (w0 & 0x3F) << 1, "sdata": w0 >> 6 & 0x7F, "glc": w0 >> 16 & 1, "imm": imm, "soe": soe,
             "offset": w1 & 0x1FFFFF}
        if f["offset"] & 0x100000:
            f["offset"] -= 0x200000
        if soe or not imm:
            f["soffset"] = (w1 >> 25 & 0x7F) if soe else (w1 & 0xFF)
            if not imm:
                f["offset"] = 0
        return Inst(addr, 8, "SMEM", op, name, f, words)
    if top6 == 0x36:  # DS
        op = w0 >> 17 & 0xFF
        name = _name(arch, "DS", op, addr, words, kernel)
        f = {"offset0": w0 & 0xFF, "offset1": w0 >> 8 & 0xFF, "gds": w0 >> 16 & 1, "acc": w0 >> 25 & 1,
             "addr": w1 & 0xFF, "data0": w1 >> 8 & 0xFF, "data1": w1 >> 16 & 0xFF, "vdst": w1 >> 24 & 0xFF}
        f["offset"] = f["offset0"] | f["offset1"] << 8
        return Inst(addr, 8, "DS", op, name, f, words)
    if top6 == 0x37:  # FLAT / SCRATCH / GLOBAL
        seg = w0 >> 14 & 3
        fam = ("FLAT", "SCRATCH", "GLOBAL", "FLAT")[seg]
        op = w0 >> 18 & 0x7F
        name = _name(arch, fam, op, addr, words, kernel)
        off = w0 & 0x1FFF
        if seg and off & 0x1000:
            off -= 0x2000
        if not seg:
            off &= 0xFFF
        f = {"offset": off, "lds": w0 >> 13 & 1, "sc0": w0 >> 16 & 1, "sc1": w0 >> 25 & 1, "nt": w0 >> 17 & 1,
             "addr": w1 & 0xFF, "data": w1 >> 8 & 0xFF, "saddr": w1 >> 16 & 0x7F, "acc": w1 >> 23 & 1,
             "vdst": w1 >> 24 & 0xFF}
        return Inst(addr, 8, fam, op, name, f, words)
    if top6 == 0x38:  # MUBUF
        op = w0 >> 18 & 0x7F
        name = _name(arch, "MUBUF", op, addr, words, kernel)
        f = {"offset": w0 & 0xFFF, "offen": w0 >> 12 & 1, "idxen": w0 >> 13 & 1, "sc0": w0 >> 14 & 1,
             "lds": w0 >> 16 & 1, "sc1": w0 >> 15 & 1, "nt": w0 >> 17 & 1,
             "vaddr": w1 & 0xFF, "vdata": w1 >> 8 & 0xFF, "srsrc": (w1 >> 16 & 0x1F) << 2,
             "acc": w1 >> 23 & 1, "soffset": w1 >> 24 & 0xFF}
        return Inst(addr, 8, "MUBUF", op, name, f, words)
    if top6 == 0x3A:  # MTBUF: a buffer access with the data format in the instruction
        op = w0 >> 15 & 0xF
        name = _name(arch, "MTBUF", op, addr, words, kernel)
        f = {"offset": w0 & 0xFFF, "offen": w0 >> 12 & 1, "idxen": w0 >> 13 & 1, "sc0": w0 >> 14 & 1,
             "dfmt": w0 >> 19 & 0xF, "nfmt": w0 >> 23 & 7, "sc1": w1 >> 21 & 1, "nt": w1 >> 22 & 1,
             "vaddr": w1 & 0xFF, "vdata": w1 >> 8 & 0xFF, "srsrc": (w1 >> 16 & 0x1F) << 2,
             "acc": w1 >> 23 & 1, "soffset": w1 >> 24 & 0xFF}
        return Inst(addr, 8, "MTBUF", op, name, f, words)
    raise SimUnsupportedInstruction(
        f"unsupported encoding {' '.join(f'{w:08X}' for w in words)} (MIMG and EXP do not exist on CDNA3/CDNA4)",
        kernel=kernel, pc=addr)
