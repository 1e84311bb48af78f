"""Static figures of a compiled op, reproducible with no GPU: `hkjit inspect OP --arch TARGET`.

Registers, LDS/shared memory, spills and occupancy come from the code object itself; the
instruction mix comes from a disassembler when one is installed (llvm-objdump for AMD,
cuobjdump for NVIDIA: on PATH or from `pip install nvidia-cuda-cuobjdump`) and is left out otherwise.
"""

import collections
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from . import codeobj, targets

_AMD_CLASSES = (
    ("mfma", re.compile(r"^v_mfma")),
    ("buffer_load_lds", re.compile(r"^buffer_load\w*.*\blds\b")),
    ("load_16B", re.compile(r"^(global|buffer)_load_dwordx4\b")),     # 16 bytes per lane
    ("buffer_load", re.compile(r"^buffer_load")),
    ("global_load", re.compile(r"^global_load")),
    ("buffer_store", re.compile(r"^buffer_store")),
    ("global_store", re.compile(r"^global_store")),
    ("ds_read", re.compile(r"^ds_read")),
    ("ds_write", re.compile(r"^ds_write")),
    ("s_barrier", re.compile(r"^s_barrier")),
    ("s_waitcnt", re.compile(r"^s_waitcnt")),
    ("valu", re.compile(r"^v_")),
    ("salu", re.compile(r"^s_")),
)


def _objdump():
    for name in ("llvm-objdump-22", "llvm-objdump-21", "llvm-objdump-20", "llvm-objdump"):
        path = shutil.which(name)
        if path:
            return path
    return None


_INST = re.compile(r"^\s+([a-z_0-9]+)(.*?)\s*//\s*([0-9A-Fa-f]+):")
_BRANCH_TARGET = re.compile(r"<(\S+)\+0x([0-9a-f]+)>")


def amd_disassembly(code: bytes, arch: str) -> list[tuple] | None:
    """(address, mnemonic, operands, branch target or None) per instruction, via llvm-objdump;
    None where no llvm-objdump is installed."""
    tool = _objdump()
    if tool is None:
        return None
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "k.hsaco"
        path.write_bytes(code)
        out = subprocess.run([tool, "-d", f"--mcpu={arch}", str(path)], capture_output=True, text=True).stdout
    symbols = {m.group(2): int(m.group(1), 16) for m in re.finditer(r"^([0-9a-f]+) <(\S+)>:", out, re.M)}
    insts = []
    for line in out.splitlines():
        m = _INST.match(line)
        if not m:
            continue
        target = None
        t = _BRANCH_TARGET.search(line)
        if t and m.group(1).startswith("s_") and "branch" in m.group(1):
            target = symbols.get(t.group(1), 0) + int(t.group(2), 16)
        insts.append((int(m.group(3), 16), m.group(1), m.group(2).strip(), target))
    return insts


def main_loop(insts):
    """(start, end) of the backward branch whose body holds the most MFMAs (the K loop)."""
    best, span = 0, None
    for addr, _op, _, target in insts:
        if target is not None and target <= addr:
            n = sum(1 for a, o, _, _ in insts if target <= a <= addr and o.startswith("v_mfma"))
            if n > best:
                best, span = n, (target, addr)
    return span


def amd_instruction_mix(insts) -> dict:
    mix = collections.Counter()
    for _addr, op, operands, _ in insts:
        line = f"{op} {operands}"
        for name, pattern in _AMD_CLASSES:
            if pattern.search(line):
                mix[name] += 1
                break
        else:
            mix["other"] += 1
    span = main_loop(insts)
    body = [i for i in insts if span and span[0] <= i[0] <= span[1]]
    loop = collections.Counter()
    for _addr, op, operands, _ in body:
        for name, pattern in _AMD_CLASSES:
            if pattern.search(f"{op} {operands}"):
                loop[name] += 1
                break
    return {"classes": dict(mix), "main_loop": dict(loop), "instructions": len(insts),
            "mfma_kinds": dict(collections.Counter(op for _, op, _, _ in insts if op.startswith("v_mfma")))}


def amd_occupancy(target, vgprs, agprs, lds_bytes, waves_per_block) -> dict:
    """Waves per SIMD and blocks per CU from registers (512 unified per lane, granule 8) and LDS per
    CU (the target's LDS size). `vgprs` is the code object's `.vgpr_count`, which on gfx90a and
    later is already the unified total (VGPRs 4-aligned, then the `agprs` AGPRs): LLVM's
    NumVGPRsForWavesPerEU; a kernel using v0..v255 and a0..a153 reports 410 / 154."""
    regs = max(8, (vgprs + 7) // 8 * 8)
    waves_regs = min(8, 512 // regs)
    blocks = max(0, waves_regs * 4 // max(1, waves_per_block))
    if lds_bytes:
        blocks = min(blocks, target.smem_per_block // lds_bytes)
    return {"waves_per_simd": blocks * waves_per_block / 4, "blocks_per_cu": blocks}


def nvidia_tool(name: str) -> str | None:
    """Path of an NVIDIA binary utility (cuobjdump, nvdisasm): on PATH, else where its pip package
    (nvidia-cuda-cuobjdump, nvidia-cuda-nvdisasm) put it, found through cuda-pathfinder (installed with
    cuda-bindings); None where neither has it."""
    found = shutil.which(name)
    if found:
        return found
    try:
        from cuda.pathfinder import find_nvidia_binary_utility
        return find_nvidia_binary_utility(name) or None
    except Exception:   # no cuda-pathfinder, or it does not know the utility: treated as absent
        return None


def nvidia_instruction_mix(code: bytes) -> dict | None:
    tool = nvidia_tool("cuobjdump")
    if tool is None:
        return None
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "k.cubin"
        path.write_bytes(code)
        out = subprocess.run([tool, "--dump-sass", str(path)], capture_output=True, text=True)
    ops = collections.Counter()
    for line in out.stdout.splitlines():
        m = re.match(r"\s*/\*[0-9a-f]{4}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)", line)
        if m:
            ops[m.group(1)] += 1
    keys = ("HGMMA", "HMMA", "UTMALDG", "UTMASTG", "LDSM", "STS", "LDS", "STG", "LDG.E.128", "LDG", "BAR", "SYNCS")
    return {"classes": {k: sum(v for op, v in ops.items() if op.startswith(k)) for k in keys},
            "instructions": sum(ops.values())}


def report(built, config, threads: int) -> dict:
    """The static figures of a built kernel: its metadata (registers, LDS/shared memory, spills),
    occupancy on AMD from registers and LDS, and the instruction mix where a disassembler is
    installed. `config`: the op's tile configuration; `threads`: the block size."""
    target = targets.parse(built.target)
    out = {"op": built.op, "target": target.id, "key": built.key, "params": dict(config),
           "code_bytes": len(built.code)}
    out.update({k: v for k, v in built.meta.items() if k not in ("params", "op", "target")})
    if target.is_amd:
        waves = threads // target.wave_size
        out.update(amd_occupancy(target, out["vgprs"], out["agprs"], out["lds_bytes"], waves))
        insts = amd_disassembly(built.code, target.arch)
        if insts is not None:
            out["instruction_mix"] = amd_instruction_mix(insts)
    else:
        mix = nvidia_instruction_mix(built.code)
        if mix is not None:
            out["instruction_mix"] = mix
    return out


def format_report(report) -> str:
    if isinstance(report, list):
        return "\n\n".join(format_report(r) for r in report)
    lines = [f"{report['op']} on {report['target']}  (key {report['key'][:16]}…, {report['code_bytes']} bytes)"]
    lines.append("  params: " + ", ".join(f"{k}={v}" for k, v in report["params"].items()))
    if targets.parse(report["target"]).is_amd:
        lines.append(f"  VGPR {report.get('vgprs')}  AGPR {report.get('agprs')}  SGPR {report.get('sgprs')}  "
                     f"LDS {report.get('lds_bytes')} B  spills {report.get('spills')}  "
                     f"scratch {report.get('scratch_bytes')} B  occupancy {report.get('waves_per_simd')} waves/SIMD "
                     f"({report.get('blocks_per_cu')} blocks/CU)")
        k = report.get("mfma_per_k_step")
        if k:
            ok = "matches" if k["per_block"] == k["tile_arithmetic"] else "DIFFERS from"
            lines.append(f"  MFMA per K-step: {k['per_wave']} per wave, {k['per_block']} per block ({ok} the "
                         f"tile arithmetic, {k['tile_arithmetic']})")
        k = report.get("mfma_per_step")   # ops that stream blocks other than K-steps (attention)
        if k:
            ok = "matches" if k["per_wave"] == k["tile_arithmetic"] else "DIFFERS from"
            lines.append(f"  MFMA per {k['step']}: {k['per_wave']} per wave ({ok} the tile arithmetic, "
                         f"{k['tile_arithmetic']}), {k['per_block']} per block")
    else:
        lines.append(f"  registers {report.get('registers')}  static smem {report.get('smem_bytes')} B  "
                     f"spills {report.get('spills')} B  stack {report.get('stack_bytes')} B")
    lines.append(f"  compiler: {report.get('compiler')}  ({report.get('compile_seconds')} s)")
    mix = report.get("instruction_mix")
    if mix:
        lines.append("  instructions: " + ", ".join(f"{k} {v}" for k, v in mix["classes"].items() if v))
        if mix.get("main_loop"):
            lines.append("  main loop:    " + ", ".join(f"{k} {v}" for k, v in mix["main_loop"].items() if v))
        if mix.get("mfma_kinds"):
            lines.append("  mfma: " + ", ".join(f"{k} ×{v}" for k, v in mix["mfma_kinds"].items()))
    return "\n".join(lines)


def amd_kernel_notes(code: bytes) -> dict:
    """The integer fields of the (single) kernel's metadata, named as the note names them without
    the dot (vgpr_count, group_segment_fixed_size, …), plus `symbols` (kernel names) and
    `args_size` (the size of the one by-value argument at offset 0, else None)."""
    kernels = codeobj.amd_metadata(code).get("amdhsa.kernels", [])
    notes = {k.lstrip("."): v for k, v in kernels[0].items() if isinstance(v, int)} if kernels else {}
    notes["symbols"] = [k.get(".name") for k in kernels]
    args = kernels[0].get(".args", []) if kernels else []
    notes["args_size"] = args[0].get(".size") if args and args[0].get(".offset") == 0 else None
    return notes


def _is_lds_dma(inst) -> bool:
    return inst[1].startswith("buffer_load") and inst[2].endswith(" lds")


def amd_gemm_loop_stats(insts) -> dict:
    """Instruction counts of a GEMM's disassembly, whole and in its main loop (`main_loop`)."""
    mfma = [i for i in insts if i[1].startswith("v_mfma")]
    span = main_loop(insts)
    body = [i for i in insts if span and span[0] <= i[0] <= span[1]]
    count = lambda seq, pred: sum(1 for i in seq if pred(i))  # noqa: E731
    return {
        "mfma_total": len(mfma),
        "mfma_ops": sorted({i[1] for i in mfma}),
        "mfma_loop": count(body, lambda i: i[1].startswith("v_mfma")),
        "loop_insts": len(body),
        "lds_dma_total": count(insts, _is_lds_dma),
        "lds_dma_loop": count(body, _is_lds_dma),
        # direct-to-LDS loads whose soffset is not the constant 0: a raw buffer's range check
        # leaves soffset out, so an offset carried there escapes num_records (must stay 0)
        "lds_dma_soffset": count(insts, lambda i: _is_lds_dma(i)
                                 and [x.strip() for x in i[2].split(",")][2].split()[0] != "0"),
        "ds_read_loop": {op: count(body, lambda i, op=op: i[1] == op)
                         for op in sorted({i[1] for i in body if i[1].startswith("ds_read")})},
        "ds_read_total": count(insts, lambda i: i[1].startswith("ds_read")),
        "barrier_loop": count(body, lambda i: i[1] == "s_barrier"),
        "waitcnt_loop": count(body, lambda i: i[1] == "s_waitcnt"),
        "global_store": count(insts, lambda i: i[1].startswith("global_store")),
        "scratch": count(insts, lambda i: i[1].startswith("scratch_") or
                         (i[1].startswith("buffer_") and "lds" not in i[2] and "off," in i[2])),
    }
