"""Reading LLVM's AMDGPU assembly text (as llvm-mc-22 prints it) into comparable operands, and the
same view of an instruction decoded by hkjit.sim.decode, for tests/sim/test_sim_conformance.py.

An operand is a *token*: ("v", n) / ("s", n) / ("ttmp", n) for the first register of a register
or tuple (AGPRs count as ("v", n): the encoding's field is the same), ("x", code) for the other
special sources (src_shared_base, scc ...), ("num", value) for an immediate."""

import math
import re
import struct

# special register names -> 9-bit source operand code
SPECIAL = {"flat_scratch": 102, "flat_scratch_lo": 102, "flat_scratch_hi": 103, "xnack_mask": 104,
           "xnack_mask_lo": 104, "xnack_mask_hi": 105, "vcc": 106, "vcc_lo": 106, "vcc_hi": 107, "m0": 124,
           "exec": 126, "exec_lo": 126, "exec_hi": 127, "src_shared_base": 235, "src_shared_limit": 236,
           "src_private_base": 237, "src_private_limit": 238, "src_pops_exiting_wave_id": 239,
           "src_vccz": 251, "vccz": 251, "src_execz": 252, "execz": 252, "src_scc": 253, "scc": 253,
           "src_lds_direct": 254, "lds_direct": 254}
FLAGS = {"offen", "idxen", "lds", "sc0", "sc1", "nt", "glc", "slc", "gds", "clamp", "row_mirror",
         "row_half_mirror", "tfe"}
_FLOATS = {240: 0.5, 241: -0.5, 242: 1.0, 243: -1.0, 244: 2.0, 245: -2.0, 246: 4.0, 247: -4.0,
           248: 1 / (2 * math.pi)}
_INV_2PI_BITS = {0x3118, 0x3E22F983, 0x3FC45F306DC9C882}


def token(code):
    """Token of a 9-bit source operand code (not an inline constant or literal)."""
    if code >= 256:
        return ("v", code - 256)
    if 108 <= code <= 123:
        return ("ttmp", code - 108)
    if code < 128:
        return ("s", code)
    return ("x", code)


def constants(code, literal=None):
    """The values LLVM may print for an inline-constant / literal source code (it prints a float
    constant as the bits of the operand's type where the operand is not a float)."""
    if 128 <= code <= 192:
        return {code - 128}
    if 193 <= code <= 208:
        return {192 - code}
    if code in _FLOATS:
        f = _FLOATS[code]
        if code == 248:
            return {f} | _INV_2PI_BITS
        bits = {struct.unpack("<H", struct.pack("<e", f))[0], struct.unpack("<I", struct.pack("<f", f))[0],
                struct.unpack("<Q", struct.pack("<d", f))[0]}
        return {f} | bits | {b >> 32 for b in bits if b >> 32}
    if code == 255 and literal is not None:
        return {literal, literal & 0xFFFF}
    return set()


def _split(rest):
    """Split operand text at spaces/commas outside brackets and parentheses."""
    out, depth, cur = [], 0, ""
    for ch in rest:
        if ch in "[(":
            depth += 1
        elif ch in "])":
            depth -= 1
        if ch in " ," and depth == 0:
            if cur:
                out.append(cur)
            cur = ""
        else:
            cur += ch
    if cur:
        out.append(cur)
    return out


def _register(t):
    m = re.fullmatch(r"(v|s|a|ttmp)(?:(\d+)|\[(\d+):\d+\])", t)
    if m:
        n = int(m.group(2) or m.group(3))
        return ("v", n) if m.group(1) == "a" else (m.group(1), n)
    if t in SPECIAL:
        return token(SPECIAL[t])
    return None


def _number(t):
    try:
        return int(t, 0)
    except ValueError:
        return float(t)


def parse(text):
    """LLVM text -> dict(name, suffix, ops [(token, decorations)], mods {key: value}, flags set)."""
    name, _, rest = text.partition(" ")
    m = re.match(r"(.*?)(?:_(e32|e64|dpp|sdwa))?$", name)
    out = {"name": m.group(1), "suffix": m.group(2), "ops": [], "mods": {}, "flags": set()}
    for piece in _split(rest):
        if re.fullmatch(r"[a-z_0-9]+:.+", piece) and not piece.startswith(("s[", "v[", "a[")):
            key, _, val = piece.partition(":")
            out["mods"][key] = val
            continue
        if piece in FLAGS:
            out["flags"].add(piece)
            continue
        if re.fullmatch(r"[a-z_]+\(.*\)", piece) and not piece.startswith(("neg(", "abs(", "sext(")):
            out["mods"][piece[:piece.index("(")]] = piece       # hwreg(...), vmcnt(3), sendmsg(...)
            continue
        if piece == "off":
            continue
        deco = set()
        while True:
            if piece.startswith("-") and not re.fullmatch(r"-\d.*", piece):
                deco.add("neg")
                piece = piece[1:]
            elif piece.startswith("|") and piece.endswith("|"):
                deco.add("abs")
                piece = piece[1:-1]
            elif re.fullmatch(r"(neg|abs|sext)\(.*\)", piece):
                deco.add(piece[:piece.index("(")])
                piece = piece[piece.index("(") + 1:-1]
            else:
                break
        reg = _register(piece)
        out["ops"].append((reg if reg else ("num", _number(piece)), frozenset(deco)))
    return out


SEL = {"BYTE_0": 0, "BYTE_1": 1, "BYTE_2": 2, "BYTE_3": 3, "WORD_0": 4, "WORD_1": 5, "DWORD": 6}
UNUSED = {"UNUSED_PAD": 0, "UNUSED_SEXT": 1, "UNUSED_PRESERVE": 2}
OMOD = {"mul:2": 1, "mul:4": 2, "div:2": 3}


def bits(listing):
    """'[1,0,1]' -> 0b101 (element i is bit i)."""
    return sum(int(x) << i for i, x in enumerate(listing.strip("[]").split(",")))


def dpp_ctrl(mods):
    """The DPP control value LLVM's modifiers describe."""
    if "quad_perm" in mods:
        return bits_base(mods["quad_perm"], 2)
    for key, base in (("row_shl", 0x100), ("row_shr", 0x110), ("row_ror", 0x120), ("row_newbcast", 0x150)):
        if key in mods:
            return base + int(mods[key], 0)
    for key, val in (("wave_shl", 0x130), ("wave_rol", 0x134), ("wave_shr", 0x138), ("wave_ror", 0x13C)):
        if key in mods:
            return val
    if "row_bcast" in mods:
        return 0x142 if int(mods["row_bcast"]) == 15 else 0x143
    return None


def bits_base(listing, width):
    return sum(int(x) << (width * i) for i, x in enumerate(listing.strip("[]").split(",")))
