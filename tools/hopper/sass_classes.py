"""Static SASS study helpers for sm_90a kernels (no GPU needed).

Count the instructions of an `nvdisasm -c` listing by class inside address ranges (a loop body,
a producer loop, an epilogue), optionally skipping sub-ranges (a masking block that only the ragged
KV block runs), and dump hkjit's attention forward cubin for a tile configuration:

    python3 tools/hopper/sass_classes.py count LISTING.sass 3670-61d0,45d0-4de0 [RANGE ...]
    PYTHONPATH=. python3 tools/hopper/sass_classes.py hkjit-fwd OUT_PREFIX "{'block_kv': 128}"

Ranges are hex byte addresses as nvdisasm prints them (/*3670*/), END inclusive; after the first
range, comma-separated START-END pairs are skipped. `hkjit-fwd` writes OUT_PREFIX.{cu,cubin,ptx,log}
(bf16, head dim 128, non-causal, dense, 16-byte aligned; NVRTC, the options hkjit pins) and, when
nvdisasm is on PATH, OUT_PREFIX.sass. docs/notes/attention_hopper_vs_fa3.md uses both.
"""
from __future__ import annotations

import ast
import re
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

_LINE = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(.*?);")

# First match wins (an opcode starting with one of the prefixes); the order puts specific classes
# before the catch-all ones, and "" (the last) matches everything.
CLASSES = (
    ("HGMMA", ("HGMMA",)),
    ("WARPGROUP.ARRIVE", ("WARPGROUP.ARRIVE",)),
    ("WARPGROUP.DEPBAR", ("WARPGROUP.DEPBAR",)),
    ("BAR (named)", ("BAR.",)),
    ("SYNCS (mbarrier)", ("SYNCS",)),
    ("FMNMX", ("FMNMX",)),
    ("MUFU.EX2", ("MUFU.EX2",)),
    ("MUFU other", ("MUFU",)),
    ("FFMA", ("FFMA",)),
    ("FMUL", ("FMUL",)),
    ("FADD", ("FADD",)),
    ("F2FP (pack)", ("F2FP",)),
    ("SHFL", ("SHFL",)),
    ("FSETP/FSEL", ("FSETP", "FSEL")),
    ("LDS/LDSM", ("LDS",)),
    ("STS/STSM", ("STS",)),
    ("LDG", ("LDG",)),
    ("STG", ("STG",)),
    ("ST (generic)", ("ST.",)),
    ("TMA (UTMA*/UBLK*)", ("UTMA", "UBLK")),
    ("branch/convergence", ("BRA", "BRX", "JMP", "EXIT", "RET", "CALL", "WARPSYNC", "BSSY", "BSYNC")),
    ("uniform (U*, R2UR, S2UR)", ("U", "R2UR", "S2UR", "VOTEU")),
    ("integer ALU, moves, other", ("",)),
)


def opcode(text: str) -> str:
    t = text.strip()
    if t.startswith("@"):                       # predicate guard
        t = t.split(None, 1)[1]
    return t.split()[0]


def classify(op: str) -> str:
    return next(name for name, prefixes in CLASSES if op.startswith(prefixes))


def parse(path) -> list[tuple[int, str]]:
    return [(int(m.group(1), 16), m.group(2)) for m in map(_LINE.search, open(path)) if m]


def count(instrs, spec: str) -> tuple[Counter, Counter]:
    first, *skips = spec.split(",")
    lo, hi = (int(x, 16) for x in first.split("-"))
    skip = [tuple(int(x, 16) for x in s.split("-")) for s in skips]
    classes, ops = Counter(), Counter()
    for addr, text in instrs:
        if lo <= addr <= hi and not any(a <= addr <= b for a, b in skip):
            op = opcode(text)
            classes[classify(op)] += 1
            ops[op] += 1
    return classes, ops


def _count_main(listing: str, specs: list[str]) -> None:
    instrs = parse(listing)
    for spec in specs:
        classes, ops = count(instrs, spec)
        print(f"== {spec}: {sum(classes.values())} instructions")
        for name, _ in CLASSES:
            if classes[name]:
                print(f"  {name:28s} {classes[name]}")
        print("  top opcodes:", ", ".join(f"{o} {n}" for o, n in ops.most_common(20)))


def _hkjit_fwd_main(prefix: str, tiles: dict) -> None:
    from hkjit import compiler, spec as spec_mod
    from hkjit.ops import _hopper_attention_fwd as F
    from hkjit.targets import parse as parse_target
    sm90 = parse_target("sm_90a")
    cfg = F.configure(sm90, dict(head_dim=128, dtype="bfloat16", causal=False, varlen=False, align=16), tiles)
    checks = (("threads", F.threads(cfg)), ("dynamic_smem", F.dynamic_smem(cfg))) + F.checks(cfg)
    spec = spec_mod.Specialization("attention", sm90, F.SOURCE, F.kernel_type(cfg), "hkjit_attention", (), checks)
    source = spec_mod.render(spec)
    out = Path(prefix)
    out.with_suffix(".cu").write_text(source)
    result = compiler.find_compiler(sm90, "nvrtc").compile(
        source, Path("attention_unit.cu"), sm90, [spec_mod.include_dir(), spec_mod.kernel_sources_dir()], spec.entry)
    out.with_suffix(".cubin").write_bytes(result.code)
    out.with_suffix(".ptx").write_text(result.ptx)
    out.with_suffix(".log").write_text(result.log)
    print(dict(cfg), "dynamic shared memory", F.dynamic_smem(cfg), "bytes")
    print(result.log)
    nvdisasm = shutil.which("nvdisasm")
    if nvdisasm:
        sass = subprocess.run([nvdisasm, "-c", str(out.with_suffix(".cubin"))], check=True, capture_output=True,
                              text=True).stdout
        out.with_suffix(".sass").write_text(sass)


if __name__ == "__main__":
    if len(sys.argv) >= 4 and sys.argv[1] == "count":
        _count_main(sys.argv[2], sys.argv[3:])
    elif len(sys.argv) in (3, 4) and sys.argv[1] == "hkjit-fwd":
        _hkjit_fwd_main(sys.argv[2], ast.literal_eval(sys.argv[3]) if len(sys.argv) == 4 else {})
    else:
        sys.exit(__doc__)
