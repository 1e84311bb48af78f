"""Developer tool: regenerate the simulator's opcode tables (hkjit/sim/_opcodes.py) and the
conformance fixture (tests/sim/data/llvm_isa_<arch>.txt) from LLVM, for gfx942 and gfx950.

    python -m hkjit.sim._gen_opcodes          # needs llvm-mc-22; users of the simulator never do
    python -m hkjit.sim._gen_opcodes --check  # compare the committed files with llvm-mc-22 (~1 min)

How "every instruction" is enumerated:
1. Every opcode value of every encoding family the targets have is made into candidate
   encodings in each of its forms: plain, a 32-bit literal source, an SGPR or inline-constant
   source, DPP (row_shr and, for 64-bit operands, row_newbcast) and SDWA (VOP1/VOP2/VOPC), VOP3
   with 3/2/1/0 sources, SGPR sources and modifiers, VOP3P with op_sel/neg and AGPR operands,
   gfx950's v_mfma_scale_* pairs, SMEM with an immediate / SGPR / both offsets, DS with AGPR data
   and GDS, FLAT/GLOBAL/SCRATCH with and without an SGPR base and cache bits, MUBUF/MTBUF with
   offen/idxen/lds. Register fields get distinct values (v2, v4, v20, v64, s4, s6, s8 ...) so that
   a field read from the wrong bits shows up as a wrong operand; since LLVM rejects non-zero
   unused fields, each form has alternatives with fewer operands, and the first one LLVM decodes
   (as valid, if any is) is kept.
   Every candidate is followed by a 32-bit word, LIT: an instruction that always takes a literal
   (v_fmamk_f32, v_madak_f16, s_setreg_imm32_b32 ...) consumes it, one that does not leaves it
   to be decoded on its own; that is how TRAILING_LITERAL is found.
2. llvm-mc-22 disassembles every candidate; the ones it decodes give the tables (opcode ->
   mnemonic). Their texts are assembled again, and what assembles is the fixture: one line per
   instruction, `<hex bytes as assembled>\t<LLVM's text>`.
3. Completeness check: every mnemonic in LLVM's library (its assembler's mnemonic table) that
   llvm-mc-22 accepts for the target must have been found by the sweep, or be an assembler alias
   of one that was (found by assembling it and disassembling the result), or generation fails.

gfx950's tables are stored as their differences from gfx942's."""

import os
import re
import subprocess
import sys

ARCHS = ("gfx942", "gfx950")
MC = "llvm-mc-22"
TRIPLE = "-triple=amdgcn-amd-amdhsa"
LIT = 0x00003344          # follows every candidate: the literal of those that take one (fits f16 ones)
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
FIXTURE_DIR = os.path.join(ROOT, "tests", "sim", "data")
SUFFIX = re.compile(r"_(e32|e64|dpp|sdwa)$")
# operand values used by the candidates: distinct per field, even (64-bit register pairs must be
# aligned on gfx90a+), SGPR quads on a multiple of 4
VD, VS0, VS1, VS2 = 64, 2, 4, 20     # an MFMA's D (up to 32 registers from v64) and C must not overlap
SD, SS0, SS1 = 8, 4, 6


def v(n):
    return 0x100 + n


# ---------------------------------------------------------------- encoders of candidate words
def sop2(op, s0=SS0):
    return [0x80000000 | op << 23 | SD << 16 | SS1 << 8 | s0]


def sopk(op):
    return [0xB0000000 | op << 23 | SD << 16 | 0x1234]


def sop1(op, s0=SS0):
    return [0xBE800000 | SD << 16 | op << 8 | s0]


def sopc(op, s0=SS0):
    return [0xBF000000 | op << 16 | SS1 << 8 | s0]


def sopp(op):
    return [[0xBF800000 | op << 16 | k] for k in (3, 0)]


def smem(op, imm=1, soe=0):
    w0 = 0xC0000000 | op << 18 | imm << 17 | soe << 14 | SD << 6 | SS0 >> 1
    if imm and not soe:
        return [w0, 0x10]
    if not imm:
        return [w0, 3]                       # offset field holds the SGPR s3
    return [w0, 0x10 | 3 << 25]              # immediate and SGPR offset


DPP_WORD = VS0 | 0x111 << 8 | 1 << 19 | 0xA << 28 | 0x5 << 24          # row_shr:1 row_mask:0xa bank_mask:0x5 bound_ctrl
DPP64_WORD = VS0 | 0x153 << 8 | 0xF << 28 | 0x3 << 24                    # row_newbcast:3 (the one 64-bit DPP)
SDWA_WORD = VS0 | 5 << 8 | 2 << 11 | 1 << 16 | 4 << 24                  # dst WORD_1 preserve, src0 BYTE_1, src1 WORD_0
SDWA_VOPC_WORD = VS0 | 1 << 15 | 10 << 8 | 1 << 16 | 4 << 24             # sdst s[10:11]


def vop_forms(enc):
    """Forms of a 32-bit VALU encoding: enc(op, src0, regs=1) -> word (regs=0: no vdst, vsrc1)."""
    return {
        "": lambda op: [[enc(op, v(VS0))], [enc(op, 0, 0)]],    # the second for v_nop (no operands)
        "sgpr": lambda op: [[enc(op, SS0)]],
        "const": lambda op: [[enc(op, 0xF2)]],        # inline constant 1.0
        "lit": lambda op: [[enc(op, 0xFF)]],          # the trailing word is the literal
        "dpp": lambda op: [[enc(op, 0xFA), DPP_WORD]],
        "dpp64": lambda op: [[enc(op, 0xFA), DPP64_WORD]],
        "sdwa": lambda op: [[enc(op, 0xF9), SDWA_WORD]],
    }


def vop2(op, src0, regs=1):
    return op << 25 | regs * VD << 17 | regs * VS1 << 9 | src0


def vop1(op, src0, regs=1):
    return 0x7E000000 | regs * VD << 17 | op << 9 | src0


def vopc(op, src0, regs=1):
    return 0x7C000000 | op << 17 | regs * VS1 << 9 | src0


_SRCS = [v(VS0) | v(VS1) << 9 | v(VS2) << 18, v(VS0) | v(VS1) << 9, v(VS0), 0]


def vop3(op, mods=False):
    """Alternatives from most operands to fewest: LLVM rejects non-zero unused fields."""
    hi = 0
    w0 = 0xD0000000 | op << 16
    if mods:   # abs[1] and op_sel[0] (or, for VOP3b, sdst s10), clamp; neg[1], omod mul:2
        w0 |= 10 << 8 | 1 << 15
        hi = 2 << 29 | 1 << 27
    return [[w0 | d, s | hi] for d in (VD, 0) for s in _SRCS]


def vop3p(op, form):
    w0 = 0xD3800000 | op << 16
    alts = []
    for d in (VD, 0):
        for s in _SRCS:
            if form == "":          # op_sel_hi [0,0,0] (MFMAs: no broadcast), or the default [1,1,1]
                alts += [[w0 | d, s], [w0 | d | 1 << 14, s | 3 << 27]]
            elif form == "hi":
                alts.append([w0 | d | 1 << 14, s | 3 << 27])
            elif form == "mods":    # op_sel [1,0,0], op_sel_hi [0,1,1], neg_lo [0,1,0], neg_hi [1,0,0], clamp
                alts.append([w0 | d | 1 << 11 | 1 << 14 | 1 << 8 | 1 << 15, s | 1 << 28 | 2 << 29])
            elif form == "acc":     # MAI: AGPR C/D and A/B, cbsz 1 abid 2 blgp 3
                alts.append([w0 | d | 1 << 15 | 1 << 8 | 2 << 11, s | 3 << 27 | 3 << 29])
    return alts


def mfma_scale(op, mfma_op):
    """gfx950's v_mfma_scale_*: v_mfma_ld_scale_b32 (op 0x2C, op_sel_hi 0) then the MFMA."""
    if op != 0x2C:
        return []
    return [[0xD3800000 | op << 16, v(20) | v(21) << 9, 0xD3800800 | mfma_op << 16, v(4) | v(12) << 9 | v(32) << 18]]


# which of (vdst, first data, second data) an instruction has: LLVM rejects a non-zero unused field
_DATA_ROLES = [(1, 1, 1), (1, 1, 0), (0, 1, 1), (0, 1, 0), (1, 0, 0), (0, 0, 0)]


def ds(op, acc=0, gds=0):
    w0 = 0xD8000000 | acc << 25 | op << 17 | gds << 16 | 0x20 << 8 | 0x10
    return [[w0 & ~0xFFFF if a == 0 and off == 0 else w0, d * VD << 24 | d1 * VS2 << 16 | d0 * VS1 << 8 | a * VS0]
            for a, off in ((1, 1), (0, 1), (0, 0)) for d, d0, d1 in _DATA_ROLES]


def flat(op, seg, saddr=0x7F, bit13=0, cache=0, acc=0, offset=0x10):
    w0 = 0xDC000000 | op << 18 | seg << 14 | bit13 << 13 | offset
    if cache:
        w0 |= 1 << 16 | 1 << 17 | 1 << 25
    return [[w0, d * VD << 24 | acc << 23 | sa << 16 | d0 * VS1 << 8 | VS0]
            for sa in ((saddr, 0) if seg == 0 else (saddr,)) for d, d0, _ in _DATA_ROLES[1::2]]


def mubuf(op, offen=0, idxen=0, lds=0, cache=0, acc=0):
    w0 = 0xE0000000 | op << 18 | lds << 16 | idxen << 13 | offen << 12 | 0x10
    if cache:
        w0 |= 1 << 14 | 1 << 15 | 1 << 17
    return [w0, 3 << 24 | acc << 23 | 2 << 16 | VS1 << 8 | VS0]


def mtbuf(op, offen=0, idxen=0):
    return [0xE8000000 | 7 << 23 | 4 << 19 | op << 15 | idxen << 13 | offen << 12 | 0x10,
            3 << 24 | 2 << 16 | VS1 << 8 | VS0]


def families():
    """family -> (number of opcode values, {form: op -> [alternative word lists]})."""
    one = lambda fn: (lambda op: [fn(op)])   # noqa: E731
    return {
        "SOP2": (96, {"": one(sop2), "lit": one(lambda op: sop2(op, 0xFF))}),
        "SOPK": (29, {"": one(sopk)}),
        "SOP1": (256, {"": one(sop1), "lit": one(lambda op: sop1(op, 0xFF))}),
        "SOPC": (128, {"": one(sopc), "lit": one(lambda op: sopc(op, 0xFF))}),
        "SOPP": (128, {"": sopp}),
        "SMEM": (256, {"": one(smem), "soff": one(lambda op: smem(op, 0)), "soe": one(lambda op: smem(op, 1, 1))}),
        "VOP2": (62, vop_forms(vop2)),
        "VOP1": (256, vop_forms(vop1)),
        "VOPC": (256, {**vop_forms(vopc), "sdwa": lambda op: [[vopc(op, 0xF9), SDWA_WORD & ~0xFF00]],
                       "sdwa_sdst": lambda op: [[vopc(op, 0xF9), SDWA_VOPC_WORD]]}),
        "VOP3": (0x380, {"": vop3, "mods": lambda op: vop3(op, True),      # SGPR sources (v_readlane ...):
                         "sgpr": lambda op: [[0xD0000000 | op << 16 | VD, s] for s in (SS0 | SS1 << 9, v(VS0) | SS1 << 9)]}),
        "VOP3P": (128, {**{f: (lambda op, f=f: vop3p(op, f)) for f in ("", "hi", "mods", "acc")},
                        "scale16": lambda op: mfma_scale(op, 0x2D), "scale32": lambda op: mfma_scale(op, 0x2E)}),
        "DS": (256, {"": ds, "acc": lambda op: ds(op, acc=1), "gds": lambda op: ds(op, gds=1)}),
        "FLAT": (128, {"": lambda op: flat(op, 0), "cache": lambda op: flat(op, 0, cache=1),
                       "acc": lambda op: flat(op, 0, acc=1)}),
        "GLOBAL": (128, {"": lambda op: flat(op, 2, offset=0x1FF0), "saddr": lambda op: flat(op, 2, saddr=10),
                         "cache": lambda op: flat(op, 2, saddr=10, cache=1), "acc": lambda op: flat(op, 2, acc=1)}),
        "SCRATCH": (128, {"": lambda op: flat(op, 1, bit13=1), "saddr": lambda op: flat(op, 1, saddr=4),
                          "both": lambda op: flat(op, 1, saddr=4, bit13=1),
                          "cache": lambda op: flat(op, 1, bit13=1, cache=1)}),
        "MUBUF": (128, {"": one(mubuf), "offen": one(lambda op: mubuf(op, offen=1)),
                        "idxen": one(lambda op: mubuf(op, idxen=1)),
                        "both": one(lambda op: mubuf(op, offen=1, idxen=1)),
                        "lds": one(lambda op: mubuf(op, offen=1, lds=1)),
                        "cache": one(lambda op: mubuf(op, offen=1, cache=1)),
                        "acc": one(lambda op: mubuf(op, offen=1, acc=1))}),
        "MTBUF": (16, {"": one(mtbuf), "offen": one(lambda op: mtbuf(op, offen=1)),
                       "both": one(lambda op: mtbuf(op, offen=1, idxen=1))}),
    }


# ---------------------------------------------------------------- running llvm-mc
def _mc(args, text):
    return subprocess.run([MC, TRIPLE, *args], input=text, capture_output=True, text=True, check=False)


def _hex(words):
    return b"".join(w.to_bytes(4, "little") for w in words)


CRASHED = []   # (arch, words) of candidates llvm-mc-22 crashes on
OPEN, CLOSE = 0xBF800006, 0xBF800007      # s_nop 6 / s_nop 7 around each candidate


def disassemble(arch, cands):
    """Decode each word list; -> {index: (LLVM's text, whether it took the following word LIT as
    its literal)} for those LLVM decodes as exactly one instruction."""
    one = _mc(["--disassemble", f"-mcpu={arch}"], " ".join(f"0x{x:02x}" for x in _hex([LIT, OPEN, CLOSE])))
    lit_text, open_text, close_text = one.stdout.split("\n")[-4:-1] if False else [
        t.strip() for t in one.stdout.strip().splitlines()[-3:]]
    # A bracketed group is decoded instruction after instruction until one fails (llvm-mc then
    # drops the rest of the group); a group cut short of a literal would crash llvm-mc, hence LIT.
    text = "\n".join("[" + " ".join(f"0x{x:02x}" for x in _hex([OPEN] + ws + [LIT, CLOSE])) + "]" for ws in cands)
    res = _mc(["--disassemble", f"-mcpu={arch}", "-show-encoding"], text)
    if res.returncode < 0:     # llvm-mc crashed on a candidate (one that has no valid form): find it
        if len(cands) == 1:
            CRASHED.append((arch, cands[0]))
            return {}
        h = len(cands) // 2
        rest = disassemble(arch, cands[h:])
        return {**disassemble(arch, cands[:h]), **{i + h: x for i, x in rest.items()}}
    groups = []
    for m in re.finditer(r"^\s*(.*?)\s*; encoding: \[[^\]]*\]$", res.stdout, re.M):
        if m.group(1) == open_text:
            groups.append([])
        else:
            groups[-1].append(m.group(1))
    if len(groups) != len(cands):
        raise RuntimeError(f"llvm-mc-22 decoded {len(groups)} groups of {len(cands)}")
    found = {}
    for i, g in enumerate(groups):
        if g[-1:] == [close_text] and len(g) == 2:
            found[i] = (g[0], True)
        elif g[-2:] == [lit_text, close_text] and len(g) == 3:
            found[i] = (g[0], False)
    return found


def assemble(arch, texts):
    """-> {index: encoding bytes} of the texts llvm-mc-22 assembles for arch."""
    res = _mc([f"-mcpu={arch}", "-show-encoding"], "\n".join(texts) + "\n")
    bad = {int(m.group(1)) - 1 for m in re.finditer(r"^<stdin>:(\d+):\d+: error", res.stderr, re.M)}
    encs = iter(bytes(int(x, 16) for x in m.group(1).split(","))
                for m in re.finditer(r"; encoding: \[([^\]]*)\]", res.stdout))
    return {i: next(encs) for i in range(len(texts)) if i not in bad}


def llvm_mnemonics():
    """Candidate mnemonics: AMDGPU-looking words in LLVM's library (its assembler's mnemonic table)."""
    lib = subprocess.run(["llvm-config-22", "--libdir"], capture_output=True, text=True).stdout.strip()
    path = next(os.path.join(lib, f) for f in sorted(os.listdir(lib)) if re.match(r"libLLVM(-\d+)?\.so", f))
    with open(os.path.realpath(path), "rb") as f:
        data = f.read()
    pat = re.compile(rb"(?<![A-Za-z0-9_])((?:s|v|ds|buffer|tbuffer|global|flat|scratch|image)_[a-z0-9_]+|exp)"
                     rb"(?![A-Za-z0-9_])")
    return sorted({m.group(1).decode() for m in pat.finditer(data)})


def supported_mnemonics(arch, words):
    """The words llvm-mc-22 accepts as a mnemonic for arch (with or without operands)."""
    res = _mc([f"-mcpu={arch}", "-show-encoding"], "\n".join(words) + "\n")
    bad = set()
    for line in res.stderr.splitlines():
        m = re.match(r"<stdin>:(\d+):\d+: error: (.*)", line)
        if m and (m.group(2).startswith("invalid instruction") or "not supported" in m.group(2)):
            bad.add(int(m.group(1)) - 1)
    return {SUFFIX.sub("", w) for i, w in enumerate(words) if i not in bad}


# ---------------------------------------------------------------- the sweep
BASE_SIZE = {"SOP2": 4, "SOPK": 4, "SOP1": 4, "SOPC": 4, "SOPP": 4, "VOP1": 4, "VOP2": 4, "VOPC": 4}


def sweep(arch, only=None):
    """-> (tables {fam: {op: mnemonic}}, literal ops {fam: sorted ops}, fixture [(bytes, text)]),
    of all families or of those named in `only`."""
    cands = []
    for fam, (n, forms) in families().items():
        if only and fam not in only:
            continue
        for op in range(n):
            for form, fn in forms.items():
                for alt in fn(op):
                    cands.append((fam, op, form, alt))
    found = {}
    for k in range(0, len(cands), 4096):    # in chunks: a crash is searched for within one chunk only
        part = disassemble(arch, [ws for _, _, _, ws in cands[k:k + 4096]])
        found.update({i + k: x for i, x in part.items()})
    tables = {fam: {} for fam in families() if not only or fam in only}
    literal = {}
    chosen = {}
    for i, (fam, op, form, ws) in enumerate(cands):
        # the first alternative LLVM decodes, preferring one it does not mark /*Invalid ...*/
        if i not in found or "/*" not in chosen.get((fam, op, form), ("", "/*"))[1]:
            continue
        text, with_lit = found[i]
        enc = _hex(ws + [LIT] if with_lit else ws)
        chosen[fam, op, form] = (enc, text)
        name = SUFFIX.sub("", text.split()[0])
        if form == "" and len(enc) > len(ws) * 4 and len(ws) * 4 == BASE_SIZE.get(fam, 8):
            literal.setdefault(fam, set()).add(op)      # takes a literal although no source is 255
        if fam == "VOP3P" and name.startswith("v_mfma_scale_"):
            continue                                    # the pair: op 0x2C alone is v_mfma_ld_scale_b32
        tables[fam].setdefault(op, name)
    # the fixture: what llvm-mc-22 assembles from LLVM's texts (not the decodable but invalid
    # encodings it marks /*Invalid ...*/), in the encoding the assembler produces
    texts = sorted({text for _, text in chosen.values() if "/*" not in text})
    fixture = sorted((enc, texts[i]) for i, enc in assemble(arch, texts).items())
    return tables, {f: sorted(s) for f, s in literal.items()}, fixture


def aliases(arch, names, fixture):
    """{alias: canonical mnemonic} for those of names that llvm-mc-22 assembles, with the operands
    of a fixture instruction of the same kind (v_mfma_*, v_accvgpr_* ...), into an instruction it
    prints under another name (v_mul_lo_i32 -> v_mul_lo_u32, v_mfma_f32_32x32x8bf16_1k ->
    v_mfma_f32_32x32x8_bf16)."""
    tries = []
    for name in names:
        kind = "_".join(name.split("_")[:2]) + "_"
        ops = sorted({t.split(None, 1)[1] for _, t in fixture if t.startswith(kind) and " " in t})
        tries += [(name, f"{name} {o}") for o in ops]
    res = _mc([f"-mcpu={arch}", "-show-encoding"], "\n".join(t for _, t in tries) + "\n")
    bad = {int(m.group(1)) - 1 for m in re.finditer(r"^<stdin>:(\d+):\d+: error", res.stderr, re.M)}
    encs = iter(m.group(1) for m in re.finditer(r"; encoding: \[([^\]]*)\]", res.stdout))
    first = {}
    for i, (name, _) in enumerate(tries):
        if i not in bad:
            first.setdefault(name, next(encs))
    # the assembler prints the alias back; the disassembler prints the canonical name
    dis = _mc(["--disassemble", f"-mcpu={arch}"], "\n".join(e.replace(",", " ") for e in first.values()))
    names = [SUFFIX.sub("", line.split()[0]) for line in dis.stdout.splitlines() if line.startswith("\t")]
    return dict(zip(first, names))


def check_complete(arch, tables, fixture):
    """Every mnemonic llvm-mc-22 accepts for arch was found by the sweep, or is an assembler alias
    of one that was; -> the aliases. Raises SystemExit naming what the sweep missed."""
    known = {n for t in tables.values() for n in t.values()}
    known |= {SUFFIX.sub("", t.split()[0]) for _, t in fixture}     # incl. v_mfma_scale_* (gfx950)
    missing = sorted(supported_mnemonics(arch, llvm_mnemonics()) - known)
    alias = {a: c for a, c in aliases(arch, missing, fixture).items() if c in known}
    missing = [m for m in missing if m not in alias]
    if missing:
        raise SystemExit(f"{arch}: llvm-mc-22 accepts {len(missing)} mnemonics the sweep did not reach "
                         f"(add the encoding form that reaches them): {', '.join(missing)}")
    return alias


# ---------------------------------------------------------------- output
def _table_lines(name, tables, indent="    "):
    out = [f"{name} = {{"]
    for fam, t in tables.items():
        out.append(f"{indent}{fam!r}: {{")
        for op, mn in sorted(t.items()):
            out.append(f"{indent * 2}{op:#x}: {mn!r},")
        out.append(f"{indent}}},")
    out.append("}")
    return out


def _without_vopc_in_vop3(table):
    """`table` with VOP3's opcodes 0x000-0x0ff left out: they are VOPC's, promoted to the 64-bit form
    (decode.py puts them back). Refuses a table where that does not hold."""
    vopc, vop3 = table.get("VOPC", {}), table.get("VOP3", {})
    promoted = {op: mn for op, mn in vop3.items() if op < 0x100}
    if promoted != vopc:
        raise SystemExit("VOP3 opcodes 0x000-0x0ff are no longer exactly VOPC's: store them in full")
    return {**table, "VOP3": {op: mn for op, mn in vop3.items() if op >= 0x100}}


def render_opcodes(results):
    base_t, base_l = results["gfx942"][:2]
    t950, l950 = results["gfx950"][:2]
    base_t, t950 = _without_vopc_in_vop3(base_t), _without_vopc_in_vop3(t950)
    diff = {}
    for fam in sorted(set(base_t) | set(t950)):
        a, b = base_t.get(fam, {}), t950.get(fam, {})
        d = {op: b.get(op) for op in sorted(set(a) | set(b)) if a.get(op) != b.get(op)}
        if d:
            diff[fam] = d
    out = ['"""Generated by hkjit/sim/_gen_opcodes.py from llvm-mc-22. Do not edit.',
           "",
           "GFX942: encoding family -> opcode -> mnemonic. GFX950_CHANGES: where gfx950 differs (None: the",
           "opcode does not exist on gfx950). VOP3 lists its opcodes from 0x100 only: 0x000-0x0ff are",
           "VOPC's, promoted (decode.py adds them). TRAILING_LITERAL: opcodes whose encoding always carries a",
           '32-bit literal after the instruction word (v_fmamk_f32, s_setreg_imm32_b32 ...)."""', ""]
    out += _table_lines("GFX942", base_t)
    out += [""] + _table_lines("GFX950_CHANGES", diff)
    out += ["", "TRAILING_LITERAL = {"]
    for arch, lit in (("gfx942", base_l), ("gfx950", l950)):
        out.append(f"    {arch!r}: {{{', '.join(f'{fam!r}: frozenset({ops!r})' for fam, ops in sorted(lit.items()))}}},")
    out.append("}")
    return "\n".join(out) + "\n"


def render_fixture(arch, fixture):
    head = [f"# Every encoding llvm-mc-22 decodes for {arch} in the forms hkjit/sim/_gen_opcodes.py sweeps,",
            "# with LLVM's text. Generated; tests/sim/test_sim_conformance.py checks the decoder against it."]
    return "\n".join(head + [f"{enc.hex()}\t{text}" for enc, text in fixture]) + "\n"


def generate():
    results = {arch: sweep(arch) for arch in ARCHS}
    for arch in ARCHS:
        results[arch] += (check_complete(arch, results[arch][0], results[arch][2]),)
    return results


def main():
    """Write the tables and fixtures, or with --check only compare them with what llvm-mc-22 says."""
    check = "--check" in sys.argv[1:]
    results = generate()
    outputs = {os.path.join(HERE, "_opcodes.py"): render_opcodes(results)}
    for arch in ARCHS:
        outputs[os.path.join(FIXTURE_DIR, f"llvm_isa_{arch}.txt")] = render_fixture(arch, results[arch][2])
        print(f"{arch}: {sum(len(t) for t in results[arch][0].values())} opcodes, {len(results[arch][2])} "
              f"encodings, {len(results[arch][3])} assembler aliases, llvm-mc crashed on "
              f"{sum(a == arch for a, _ in CRASHED)} candidates", file=sys.stderr)
    stale = []
    for path, text in outputs.items():
        old = open(path).read() if os.path.exists(path) else None
        if old != text:
            stale.append(path)
            if not check:
                os.makedirs(os.path.dirname(path), exist_ok=True)
                with open(path, "w") as f:
                    f.write(text)
    if check and stale:
        raise SystemExit(f"out of date with llvm-mc-22 (run python -m hkjit.sim._gen_opcodes): {', '.join(stale)}")
    print(("up to date: " if check else "written: ") + ", ".join(outputs), file=sys.stderr)


if __name__ == "__main__":
    main()
