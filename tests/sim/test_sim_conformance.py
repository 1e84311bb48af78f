"""The decoder against LLVM, for every instruction llvm-mc-22 assembles for gfx942 and gfx950 (in
every encoding form: literal, inline constant, DPP, SDWA, VOP3 modifiers, AGPR data, buffer
addressing modes ...), from the fixture tests/sim/data/llvm_isa_<arch>.txt that
hkjit/sim/_gen_opcodes.py generates: same mnemonic, length and operands (registers, immediates,
offsets, DPP/SDWA controls, op_sel/neg/abs, cache bits). And every one of them either compiles to
the simulator's closure or is refused as not simulated with a reason (hkjit.sim.coverage)."""

import fnmatch
import os
import shutil
import types

import pytest

from hkjit.sim import SimUnsupportedInstruction, coverage
from hkjit.sim.decode import decode
from hkjit.sim.machine import Machine
from hkjit.sim.memory import Memory
from llvm_text import OMOD, SEL, UNUSED, bits, constants, dpp_ctrl, parse, token

ARCHS = ("gfx942", "gfx950")
DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")
IMPLICIT_VCC = ("s", 106)


def fixture(arch):
    with open(os.path.join(DATA, f"llvm_isa_{arch}.txt")) as f:
        return [(bytes.fromhex(a), b) for a, b in (line.rstrip("\n").split("\t") for line in f if line[0] != "#")]


def decode_all(enc, arch):
    """One instruction, or the pair gfx950 prints as one v_mfma_scale_* (ld_scale + the MFMA)."""
    insts = [decode(enc, 0, arch)]
    while sum(i.size for i in insts) < len(enc) and insts[-1].name == "v_mfma_ld_scale_b32":
        insts.append(decode(enc, insts[-1].size, arch))
    return insts


# ---------------------------------------------------------------- what our decoding says
_VREG = ("vdst", "vsrc1", "addr", "vaddr", "data0", "data1", "data", "vdata")
_SREG = ("sdst", "sdata", "sbase", "srsrc", "saddr")
_SRC = ("src0", "src1", "src2", "ssrc0", "ssrc1", "soffset")


def ours(inst):
    """(register tokens, immediate values, {source index: token or constant set}) of an Inst."""
    f, fam = inst.f, inst.fam
    regs, nums = set(), set()
    for k in _VREG:
        if k in f:
            regs |= {("v", f[k]), ("s", f[k]), token(f[k])}    # the field's register file is the op's
    for k in _SREG:
        if k in f and not (k == "saddr" and f[k] == 0x7F):
            regs |= {token(f[k]), ("s", f[k])}
    for k in _SRC:
        if k in f and not (k == "soffset" and fam == "SMEM" and not (f["soe"] or not f["imm"])):
            if f[k] in (255,) or 128 <= f[k] <= 208 or 240 <= f[k] <= 248:
                nums |= constants(f[k], f.get("literal"))
            else:
                regs.add(token(f[k]))
    if fam in ("SOPK", "SOPP"):
        k = f["simm16"]
        nums |= {k, k - 0x10000 if k & 0x8000 else k}
    if fam == "SMEM":
        nums |= {f["offset"], f["sdata"]}      # s_atc_probe's sdata field is a mask
    if "literal" in f:
        nums |= constants(255, f["literal"])
    sources = []
    if fam in ("VOP1", "VOP2", "VOPC"):
        sources = [f["src0"]] + ([f["vsrc1"] + 256] if "vsrc1" in f else [])
    elif fam in ("VOP3", "VOP3P"):
        sources = [f["src0"], f["src1"]] + ([f["src2"]] if "src2" in f else [])
    return regs, nums, sources


def _matches(tok, code, literal):
    if tok[0] == "num":
        return any(_same(tok[1], c) for c in constants(code, literal))
    return token(code) == tok


def _same(a, b):
    return a == b or (isinstance(a, float) and abs(a - b) < 1e-6 * max(1.0, abs(b)))


def check(enc, text, arch):
    """-> a list of disagreements between our decoding and LLVM's text (empty when they agree)."""
    want = parse(text)
    insts = decode_all(enc, arch)
    inst, bad = insts[-1], []
    name = inst.name if len(insts) == 1 else inst.name.replace("v_mfma_", "v_mfma_scale_")
    if name != want["name"]:
        bad.append(f"mnemonic {name}")
    if sum(i.size for i in insts) != len(enc):
        bad.append(f"length {sum(i.size for i in insts)}")
    if want["suffix"] in ("dpp", "sdwa") and inst.sub != want["suffix"]:
        bad.append(f"form {inst.sub}")
    regs, nums, sources = set(), set(), []
    for i in insts:
        r, n, s = ours(i)
        regs, nums, sources = regs | r, nums | n, sources + s
    f, fam = inst.f, inst.fam
    implicit = {IMPLICIT_VCC} if fam in ("VOP1", "VOP2", "VOPC") else set()
    for tok, deco in want["ops"]:
        if tok[0] == "num":
            if not any(_same(tok[1], v) for v in nums):
                bad.append(f"immediate {tok[1]:#x}" if isinstance(tok[1], int) else f"immediate {tok[1]}")
        elif tok not in regs and tok not in implicit:
            bad.append(f"operand {tok}")
        for d in deco:
            field = {"neg": "neg", "abs": "abs", "sext": None}[d]
            if fam == "VOP3P" and d == "abs":
                field = "neg_hi"           # v_fma_mix*: neg_hi holds abs
            idx = [i for i, c in enumerate(sources) if _matches(tok, c, f.get("literal"))]
            if d == "sext":
                ok = any(f.get(f"src{i}_sext") for i in idx)
            else:
                ok = any(f.get(field, 0) >> i & 1 for i in idx)
            if not ok:
                bad.append(f"{d} on {tok}")
    bad += _modifiers(want, inst, {k: v for i in insts for k, v in i.f.items()})
    return bad


def _modifiers(want, inst, f):
    """f: the fields (of both halves of a v_mfma_scale_*)."""
    fam, mods, bad = inst.fam, want["mods"], []

    def eq(key, got, exp):
        if got != exp:
            bad.append(f"{key}: {got} (LLVM {exp})")

    for key, val in mods.items():
        if key in ("offset", "offset0", "offset1") and not val.startswith("swizzle"):
            eq(key, f[key], int(val, 0))
        elif key in ("row_mask", "bank_mask", "bound_ctrl", "cbsz", "abid", "blgp"):
            eq(key, f[key], int(val, 0))
        elif key in ("dst_sel", "src0_sel", "src1_sel"):
            eq(key, f[key], SEL[val])
        elif key == "dst_unused":
            eq(key, f[key], UNUSED[val])
        elif key in ("op_sel", "op_sel_hi", "neg_lo", "neg_hi"):
            field = {"neg_lo": "neg"}.get(key, key)
            n = len(val.strip("[]").split(","))
            eq(key, f[field] & ((1 << n) - 1), bits(val))
        elif key in ("mul", "div"):
            eq("omod", f["omod"], OMOD[f"{key}:{val}"])
    if inst.sub == "dpp":
        eq("dpp_ctrl", f["dpp_ctrl"], dpp_ctrl({**mods, **{k: "" for k in want["flags"]}}) if not
           ({"row_mirror", "row_half_mirror"} & want["flags"]) else
           (0x140 if "row_mirror" in want["flags"] else 0x141))
        eq("bound_ctrl", f["bound_ctrl"], int(mods.get("bound_ctrl", "0"), 0))
    flags = {"MUBUF": ("offen", "idxen", "lds", "sc0", "sc1", "nt"), "MTBUF": ("offen", "idxen", "sc0", "sc1", "nt"),
             "FLAT": ("sc0", "sc1", "nt"), "GLOBAL": ("sc0", "sc1", "nt"), "SCRATCH": ("sc0", "sc1", "nt"),
             "DS": ("gds",), "SMEM": ("glc",), "VOP3": ("clamp",), "VOP3P": ("clamp",)}.get(fam, ())
    for k in flags:
        if bool(f.get(k)) != (k in want["flags"]):
            bad.append(f"{k}: {f.get(k)}")
    return bad


@pytest.mark.parametrize("arch", ARCHS)
def test_decoder_agrees_with_llvm_on_every_instruction(arch):
    rows = fixture(arch)
    assert len(rows) > 4000
    wrong = []
    for enc, text in rows:
        try:
            bad = check(enc, text, arch)
        except Exception as e:       # noqa: BLE001 - reported with the instruction below
            bad = [f"{type(e).__name__}: {e}"]
        if bad:
            wrong.append(f"{enc.hex()} {text}: {'; '.join(bad)}")
    assert not wrong, f"{len(wrong)} of {len(rows)} disagree, e.g.\n" + "\n".join(wrong[:40])


@pytest.mark.parametrize("arch", ARCHS)
def test_fixture_covers_every_mnemonic_of_the_tables(arch):
    from hkjit.sim.decode import OPCODES
    names = {n for table in OPCODES[arch].values() for n in table.values()}
    assert names - {parse(text)["name"] for _, text in fixture(arch)} == set()


@pytest.mark.skipif(shutil.which("llvm-mc-22") is None, reason="llvm-mc-22 is not installed")
@pytest.mark.parametrize("arch", ARCHS)
def test_committed_tables_match_llvm_mc(arch):
    """A quick re-run of the generator's sweep on the families with trailing literals (the full
    comparison, ~30 s: python -m hkjit.sim._gen_opcodes --check)."""
    from hkjit.sim import _gen_opcodes as gen
    from hkjit.sim._opcodes import TRAILING_LITERAL
    from hkjit.sim.decode import OPCODES
    tables, literal, rows = gen.sweep(arch, only=("VOP2", "SOPK"))
    for fam, table in tables.items():
        assert table == OPCODES[arch][fam], fam
    assert literal == {f: sorted(ops) for f, ops in TRAILING_LITERAL[arch].items()}
    assert set(rows) <= set(fixture(arch))


# ---------------------------------------------------------------- every instruction compiles or is refused
def _probe_machine(arch, code):
    """A Machine over one instruction's bytes, with every register available."""
    kernel = types.SimpleNamespace(name="probe", meta={".vgpr_count": 256, ".agpr_count": 256}, code=code,
                                   descriptor=types.SimpleNamespace(wave32=False), entry_addr=0, text_addr=0)
    return Machine(kernel, arch, Memory())


def compile_outcome(enc, arch):
    """None if the simulator compiles the instruction, else the reason it gives for refusing it."""
    m = _probe_machine(arch, enc)
    try:
        for inst in decode_all(enc, arch):
            m.compile(inst)
    except SimUnsupportedInstruction as e:
        return e.message
    return None


@pytest.mark.parametrize("arch", ARCHS)
def test_every_instruction_is_simulated_or_refused_for_a_documented_reason(arch):
    limits = [coverage.limit(k) for k in coverage.LIMITS]
    wrong = []
    for enc, text in fixture(arch):
        name = parse(text)["name"].replace("v_mfma_scale_", "v_mfma_")
        try:
            why = compile_outcome(enc, arch)
        except Exception as e:       # noqa: BLE001 - an internal error, reported below
            wrong.append(f"{text}: {type(e).__name__}: {e}")
            continue
        listed = coverage.why_not(name)
        if listed and (why is None or listed not in why):
            wrong.append(f"{text}: listed as not simulated ({listed}) but {why or 'compiles'}")
        elif not listed and why is not None and not any(lim in why for lim in limits):
            wrong.append(f"{text}: {why}")
    assert not wrong, f"{len(wrong)} instructions neither simulated nor documented:\n" + "\n".join(wrong[:2000])


def test_not_simulated_list_is_used_and_documented():
    from hkjit.sim.decode import OPCODES
    names = {n for a in ARCHS for t in OPCODES[a].values() for n in t.values()}
    with open(os.path.join(os.path.dirname(DATA), "..", "..", "docs", "notes", "simulator.md")) as f:
        notes = f.read()
    for reason, patterns in coverage.NOT_SIMULATED.items():
        for p in patterns:
            assert any(fnmatch.fnmatchcase(n, p) for n in names), f"{p!r} matches no instruction"
        assert reason in notes, f"docs/notes/simulator.md does not list: {reason}"
    for text in coverage.LIMITS.values():
        assert text in notes, f"docs/notes/simulator.md does not list: {text}"
