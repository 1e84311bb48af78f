"""Static figures of a compiled op, reproducible with no GPU: `hkjit inspect OP --arch TARGET`.

Registers, LDS/shared memory, spills and occupancy come from the code object itself; the
instruction mix comes from a disassembler when one is installed (llvm-objdump for AMD,
cuobjdump for NVIDIA) and is left out otherwise.
"""

import collections
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from . import api, targets

_AMD_CLASSES = (
    ("mfma", re.compile(r"^v_mfma")),
    ("buffer_load_lds", re.compile(r"^buffer_load\w*.*\blds\b")),
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


def amd_disassembly(code: bytes, arch: str) -> list[str] | None:
    tool = _objdump()
    if tool is None:
        return None
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "k.hsaco"
        path.write_bytes(code)
        out = subprocess.run([tool, "-d", f"--mcpu={arch}", str(path)], capture_output=True, text=True)
    return [line.strip().split("//")[0].strip() for line in out.stdout.splitlines()
            if line.startswith("\t") or line.startswith("  ")]


def amd_instruction_mix(lines: list[str]) -> dict:
    mix = collections.Counter()
    for line in lines:
        mnemonic_line = line.strip()
        if not mnemonic_line:
            continue
        for name, pattern in _AMD_CLASSES:
            if pattern.search(mnemonic_line):
                mix[name] += 1
                break
        else:
            mix["other"] += 1
    mfma = collections.Counter(l.split()[0] for l in lines if l.startswith("v_mfma"))
    return {"classes": dict(mix), "mfma_kinds": dict(mfma), "instructions": len(lines)}


def nvidia_instruction_mix(code: bytes) -> dict | None:
    tool = shutil.which("cuobjdump")
    if tool is None:
        return None
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "k.cubin"
        path.write_bytes(code)
        out = subprocess.run([tool, "--dump-sass", str(path)], capture_output=True, text=True)
    ops = collections.Counter()
    for line in out.stdout.splitlines():
        m = re.match(r"\s*/\*[0-9a-f]{4}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*)", line)
        if m:
            ops[m.group(1)] += 1
    keys = ("HGMMA", "HMMA", "UTMALDG", "UTMASTG", "LDSM", "STS", "LDS", "STG", "LDG", "BAR", "SYNCS")
    return {"classes": {k: sum(v for op, v in ops.items() if op.startswith(k)) for k in keys},
            "instructions": sum(ops.values())}


def inspect(op: str, arch: str, **params) -> dict | list:
    """The static report of `op` on each target in `arch` (comma-separated)."""
    if "," in arch:
        return [inspect(op, a, **params) for a in arch.split(",")]
    target = targets.parse(arch)
    if op == "gemm":
        params.setdefault("m", 8192)
        params.setdefault("n", 8192)
        params.setdefault("k", 8192)
    built = api.build(op, target=target.id, **params)
    report = {"op": op, "target": target.id, "key": built.key, "params": built.meta.get("params", {}),
              "code_bytes": len(built.code)}
    report.update({k: v for k, v in built.meta.items() if k not in ("params", "op", "target")})
    if target.is_amd:
        lines = amd_disassembly(built.code, target.arch)
        if lines is not None:
            report["instruction_mix"] = amd_instruction_mix(lines)
    else:
        mix = nvidia_instruction_mix(built.code)
        if mix is not None:
            report["instruction_mix"] = mix
    return report


def format_report(report) -> str:
    if isinstance(report, list):
        return "\n\n".join(format_report(r) for r in report)
    lines = [f"{report['op']} on {report['target']}  (key {report['key'][:16]}…, {report['code_bytes']} bytes)"]
    lines.append("  params: " + ", ".join(f"{k}={v}" for k, v in report["params"].items()))
    if targets.parse(report["target"]).is_amd:
        lines.append(f"  VGPR {report.get('vgprs')}  AGPR {report.get('agprs')}  SGPR {report.get('sgprs')}  "
                     f"LDS {report.get('lds_bytes')} B  spills {report.get('spills')}  "
                     f"scratch {report.get('scratch_bytes')} B  occupancy {report.get('waves_per_simd')} waves/SIMD")
    else:
        lines.append(f"  registers {report.get('registers')}  static smem {report.get('smem_bytes')} B  "
                     f"spills {report.get('spills')} B  stack {report.get('stack_bytes')} B")
    lines.append(f"  compiler: {report.get('compiler')}  ({report.get('compile_seconds')} s)")
    mix = report.get("instruction_mix")
    if mix:
        lines.append("  instructions: " + ", ".join(f"{k} {v}" for k, v in mix["classes"].items() if v))
        if mix.get("mfma_kinds"):
            lines.append("  mfma: " + ", ".join(f"{k} ×{v}" for k, v in mix["mfma_kinds"].items()))
    return "\n".join(lines)
