"""Static SASS study helpers for sm_90a kernels (no GPU needed).

Count the instructions of an `nvdisasm -c` listing by class inside address ranges (a loop body,
a producer loop, an epilogue), optionally skipping sub-ranges (a masking block that only the ragged
KV block runs), and dump hkjit's attention forward cubin for a tile configuration:

    python3 tools/hopper/sass_classes.py count LISTING.sass 3670-61d0,45d0-4de0 [RANGE ...]
    PYTHONPATH=. python3 tools/hopper/sass_classes.py hkjit-fwd OUT_PREFIX "{'block_kv': 128}"
    PYTHONPATH=. python3 tools/hopper/sass_classes.py hkjit-fwd OUT_PREFIX "{'head_dim': 64, 'causal': True, 'lean': 2}"
    python3 tools/hopper/sass_classes.py loop A.sass B.sass ...      # the consumer loop, side by side
    PYTHONPATH=. python3 tools/hopper/sass_classes.py hkjit-bwd OUT_PREFIX "{'dkdv_consumer': 3}"
    python3 tools/hopper/sass_classes.py bwd-loop A.sass B.sass ...  # the backward's consumer loop
    python3 tools/hopper/sass_classes.py edges A.sass B.sass ...     # a block's prologue and epilogue

Ranges are hex byte addresses as nvdisasm prints them (/*3670*/), END inclusive; after the first
range, comma-separated START-END pairs are skipped. `hkjit-fwd` writes OUT_PREFIX.{cu,cubin,ptx,log}
(bf16, head dim 128, non-causal, dense, 16-byte aligned; NVRTC, the options hkjit pins) and, when
nvdisasm is on PATH, OUT_PREFIX.sass; "head_dim", "causal", "dtype", "varlen" and "align" in the dict
set the call instead of the tiles. `loop` finds the forward's consumer loop in each listing by itself
and counts the paths a KV block takes through it (fast: no edge mask, no max moved; max moved; longest),
the ping-pong turn and where the wait retiring P V sits. `hkjit-bwd` does for the attention backward's
dK/dV kernel what `hkjit-fwd` does for the forward (tiles: dkdv_* and the rest of its overrides), and
`bwd-loop` counts its consumer loop (one path: the step has no branch but the wait retries) with the
order of its products, waits and barrier. docs/notes/attention_hopper_vs_fa3.md,
attention_hopper_fwd_sass.md and attention_hopper.md ("dkdv_consumer") use them.
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


_LABEL = re.compile(r"^(\.L_x_\d+):")
_BRANCH = re.compile(r"^(@!?U?P\w+\s+)?BRA(\.\S+)?\s+(!?U?P\w+,\s*)?`\((\.L_x_\d+)\)")


def labels_and_branches(path) -> tuple[dict, list[tuple[int, str, bool]]]:
    """Label -> address of the instruction after it; (address, target label, conditional) per BRA."""
    labels, branches, pending = {}, [], []
    for line in open(path):
        m = _LABEL.match(line.strip())
        if m:
            pending.append(m.group(1))
            continue
        m = _LINE.search(line)
        if not m:
            continue
        addr, text = int(m.group(1), 16), m.group(2).strip()
        for name in pending:
            labels[name] = addr
        pending = []
        b = _BRANCH.match(text)
        if b:
            branches.append((addr, b.group(4), bool(b.group(1))))
    return labels, branches


def consumer_loop(path) -> tuple[int, int]:
    """(first, last) address of the attention forward's consumer main loop: the shortest backward
    branch whose body holds HGMMAs with A in registers (O += P V; out-of-line wait retries jump back
    from the function's end, their spans are longer)."""
    instrs = parse(path)
    labels, branches = labels_and_branches(path)
    best = None
    for addr, target, _ in branches:
        lo = labels.get(target)
        if lo is None or lo >= addr:
            continue
        if any(lo <= a <= addr and re.match(r"HGMMA\S* R\d+, R\d+, gdesc", t) for a, t in instrs):
            if best is None or addr - lo < best[1] - best[0]:        # the innermost such loop
                best = (lo, addr)
    if best is None:
        raise SystemExit(f"{path}: no loop with register-A HGMMAs")
    return best


# Paths through the loop body, one per objective (a key to minimise over the instructions a path runs):
PATHS = (
    ("fast path", lambda ops: (len(ops),)),                           # no edge mask, no max moved
    ("max moved", lambda ops: (-ops.count("FMUL"), len(ops))),        # + O's rescale, still no mask
    ("longest", lambda ops: (-len(ops),)),                             # an edge block whose max moved
)


def loop_path(path, lo: int, hi: int, key) -> list[str]:
    """The instructions of the path from the loop's head to its back edge that minimises key(opcodes).
    A conditional branch inside the body may go either way; branches out of it (wait retries) are not
    taken; the body holds no other backward branch."""
    labels, branches = labels_and_branches(path)
    body = [(a, t) for a, t in parse(path) if lo <= a <= hi]
    index = {a: i for i, (a, _) in enumerate(body)}
    jumps = {a: (labels[t], cond) for a, t, cond in branches if lo <= a < hi and lo < labels.get(t, -1) <= hi}
    best = [None] * (len(body) + 1)
    best[len(body)] = []
    for i in range(len(body) - 1, -1, -1):
        a, text = body[i]
        nexts = [i + 1]
        if a in jumps:
            target = index[jumps[a][0]]
            nexts = [i + 1, target] if jumps[a][1] else [target]
        best[i] = [text] + min((best[n] for n in nexts), key=lambda p: key([opcode(t) for t in p]))
    return best[0]


def loop_facts(body: list[str]) -> tuple[int, str]:
    """(instructions of the ping-pong turn: from the loop's named-barrier wait to its arrive, i.e. what
    the other consumer waits behind; how many of the path's MUFU.EX2 come before its last full wgmma
    wait `WARPGROUP.DEPBAR.LE gsb0, 0x0` (the one that retires P V): all of them = the softmax runs
    under this warpgroup's own P V, none = the wait sits ahead of it)."""
    sync = next((i for i, t in enumerate(body) if opcode(t).startswith("BAR.SYNC")), None)
    arv = next((i for i, t in enumerate(body) if opcode(t).startswith("BAR.ARV")), None)
    turn = arv - sync - 1 if sync is not None and arv is not None else 0
    ex2 = [i for i, t in enumerate(body) if opcode(t) == "MUFU.EX2"]
    waits = [i for i, t in enumerate(body) if opcode(t) == "WARPGROUP.DEPBAR.LE" and t.rstrip().endswith("0x0")]
    before = sum(i < waits[-1] for i in ex2) if waits else 0
    return turn, f"{before}/{len(ex2)}"


def _loop_main(listings: list[str]) -> None:
    """Per listing, the consumer loop a KV block runs: its fast path by class, the path where some row's
    max moved (lean's rescale is behind a branch), the longest path, the turn and the wait's place."""
    paths = {}
    for listing in listings:
        lo, hi = consumer_loop(listing)
        paths[listing] = (f"{lo:x}-{hi:x}", {name: loop_path(listing, lo, hi, key) for name, key in PATHS})
    fast = {x: Counter(classify(opcode(t)) for t in p[1]["fast path"]) for x, p in paths.items()}
    names = [n for n, _ in CLASSES if any(c[n] for c in fast.values())]
    row = lambda label, values: print(label.ljust(28), *(str(v).rjust(16) for v in values))
    row("per warp, per KV block", (Path(x).stem for x in listings))
    row("loop", (p[0] for p in paths.values()))
    for name, _ in PATHS:
        row(f"total, {name}", (len(p[1][name]) for p in paths.values()))
    for n in names:
        row(f"  {n}", (c[n] for c in fast.values()))
    facts = [loop_facts(p[1]["fast path"]) for p in paths.values()]
    row("ping-pong turn", (f[0] for f in facts))
    row("EX2 before the P V wait", (f[1] for f in facts))


def _count_main(listing: str, specs: list[str]) -> None:
    instrs = parse(listing)
    for spec in specs:
        classes, ops = count(instrs, spec)
        print(f"== {spec}: {sum(classes.values())} instructions")
        for name, _ in CLASSES:
            if classes[name]:
                print(f"  {name:28s} {classes[name]}")
        print("  top opcodes:", ", ".join(f"{o} {n}" for o, n in ops.most_common(20)))


def bwd_consumer_loop(path) -> tuple[int, int]:
    """(first, last) address of the attention backward's consumer loop: the shortest backward branch
    whose body holds every HGMMA of the kernel (its five products a step)."""
    instrs = parse(path)
    hgmma = [a for a, t in instrs if opcode(t).startswith("HGMMA")]
    labels, branches = labels_and_branches(path)
    spans = [(labels[t], a) for a, t, _ in branches if t in labels and labels[t] <= hgmma[0] and hgmma[-1] <= a]
    if not spans:
        raise SystemExit(f"{path}: no loop around the HGMMAs")
    return min(spans, key=lambda x: x[1] - x[0])


def bwd_order(body: list[str]) -> str:
    """The step's products, waits, barrier and stmatrix in order ("HGMMA.64x64x16 x8", "wait<=1", ...);
    ptxas's stand-in for an empty commit group (HGMMA.64x8x16 on RZ) is left out."""
    out = []
    for t in body:
        op = opcode(t)
        if op.startswith("HGMMA.64x8x16"):
            continue
        item = (op.split(".F32")[0] if op.startswith("HGMMA") else
                "wait<=" + str(int(t.split()[-1], 16)) if op.startswith("WARPGROUP.DEPBAR") else
                "bar" if op.startswith("BAR.SYNC") else "STSM" if op.startswith("STSM") else None)
        if item is None:
            continue
        if out and out[-1][0] == item and not item.startswith("wait"):
            out[-1][1] += 1
        else:
            out.append([item, 1])
    return " ".join(f"{i} x{n}" if n > 1 else i for i, n in out)


def _bwd_loop_main(listings: list[str]) -> None:
    loops = {x: bwd_consumer_loop(x) for x in listings}
    counts = {x: count(parse(x), f"{lo:x}-{hi:x}")[0] for x, (lo, hi) in loops.items()}
    names = [n for n, _ in CLASSES if any(c[n] for c in counts.values())]
    row = lambda label, values: print(label.ljust(28), *(str(v).rjust(16) for v in values))
    row("per warp, per query block", (Path(x).stem for x in listings))
    row("loop", (f"{lo:x}-{hi:x}" for lo, hi in loops.values()))
    row("total", (sum(c.values()) for c in counts.values()))
    for n in names:
        row(f"  {n}", (c[n] for c in counts.values()))
    for x, (lo, hi) in loops.items():
        print(f"{Path(x).stem}: {bwd_order([t for a, t in parse(x) if lo <= a <= hi])}")


def _hkjit_bwd_main(prefix: str, tiles: dict) -> None:
    from hkjit import spec as spec_mod
    from hkjit.ops import _hopper_attention_bwd as B
    from hkjit.targets import parse as parse_target
    sm90, k = parse_target("sm_90a"), B.DKDV
    params = dict(head_dim=128, dtype="bfloat16", causal=False, varlen=False, align=16, heads=1, kv_heads=1)
    params.update({name: tiles.pop(name) for name in list(tiles) if name in params})
    cfg = k.configure(sm90, params, tiles)
    checks = (("threads", k.threads(cfg)), ("dynamic_smem", k.dynamic_smem(cfg))) + k.checks(cfg)
    spec = spec_mod.Specialization(k.name, sm90, k.SOURCE, k.kernel_type(cfg), "hkjit_bwd", (), checks)
    _write(prefix, spec, "attention_bwd_unit.cu")
    print(dict(cfg), "dynamic shared memory", k.dynamic_smem(cfg), "bytes")


def _write(prefix: str, spec, unit: str) -> None:
    """Compile spec with NVRTC (hkjit's pinned options); OUT_PREFIX.{cu,cubin,ptx,log}, and .sass where
    nvdisasm is on PATH."""
    from hkjit import compiler, spec as spec_mod
    source = spec_mod.render(spec)
    out = Path(prefix)
    out.with_suffix(".cu").write_text(source)
    result = compiler.find_compiler(spec.target, "nvrtc").compile(
        source, Path(unit), spec.target, [spec_mod.include_dir(), spec_mod.kernel_sources_dir()], spec.entry)
    out.with_suffix(".cubin").write_bytes(result.code)
    out.with_suffix(".ptx").write_text(result.ptx)
    out.with_suffix(".log").write_text(result.log)
    print(result.log)
    nvdisasm = shutil.which("nvdisasm")
    if nvdisasm:
        sass = subprocess.run([nvdisasm, "-c", str(out.with_suffix(".cubin"))], check=True, capture_output=True,
                              text=True).stdout
        out.with_suffix(".sass").write_text(sass)


def edges(path) -> dict:
    """What a forward block issues outside its KV loop, counted statically (each instruction once; the
    paths are straight-line but for rare branches: thread 0's barrier set-up, rows past the sequence):
    "prologue", entry to the first HGMMA (the barrier set-up, the register split, the Q load, the first
    stage wait); "epilogue", after the last HGMMA to the first unconditional EXIT (the last P V's wait,
    O /= l, LSE, O's and LSE's stores). With the opcodes that say how: global loads / cp.async / stores."""
    instrs = parse(path)
    ops = [(a, opcode(t), t) for a, t in instrs]
    mma = [i for i, (_, op, _) in enumerate(ops) if op.startswith("HGMMA")]
    end = next(i for i in range(mma[-1], len(ops)) if ops[i][1] == "EXIT" and not ops[i][2].strip().startswith("@"))
    out = {}
    for name, part in (("prologue", ops[:mma[0]]), ("epilogue", ops[mma[-1] + 1:end + 1])):
        kinds = Counter(op.split(".")[0] for _, op, _ in part)
        out[name] = (len(part), {k: kinds[k] for k in ("LDG", "LDGSTS", "ST", "STS", "STG", "BSSY", "BAR") if kinds[k]})
    return out


def _edges_main(listings: list[str]) -> None:
    for path in listings:
        e = edges(path)
        print(f"{Path(path).stem:24s} " + "  ".join(f"{k} {n} {kinds}" for k, (n, kinds) in e.items()))


def _hkjit_fwd_main(prefix: str, tiles: dict) -> None:
    from hkjit import spec as spec_mod
    from hkjit.ops import _hopper_attention_fwd as F
    from hkjit.targets import parse as parse_target
    sm90 = parse_target("sm_90a")
    params = dict(head_dim=128, dtype="bfloat16", causal=False, varlen=False, align=16)
    params.update({k: tiles.pop(k) for k in list(tiles) if k in params})
    cfg = F.configure(sm90, params, tiles)
    checks = (("threads", F.threads(cfg)), ("dynamic_smem", F.dynamic_smem(cfg))) + F.checks(cfg)
    spec = spec_mod.Specialization("attention", sm90, F.SOURCE, F.kernel_type(cfg), "hkjit_attention", (), checks)
    print(dict(cfg), "dynamic shared memory", F.dynamic_smem(cfg), "bytes")
    _write(prefix, spec, "attention_unit.cu")


if __name__ == "__main__":
    if len(sys.argv) >= 4 and sys.argv[1] == "count":
        _count_main(sys.argv[2], sys.argv[3:])
    elif len(sys.argv) >= 3 and sys.argv[1] == "loop":
        _loop_main(sys.argv[2:])
    elif len(sys.argv) >= 3 and sys.argv[1] == "edges":
        _edges_main(sys.argv[2:])
    elif len(sys.argv) in (3, 4) and sys.argv[1] == "hkjit-fwd":
        _hkjit_fwd_main(sys.argv[2], ast.literal_eval(sys.argv[3]) if len(sys.argv) == 4 else {})
    elif len(sys.argv) in (3, 4) and sys.argv[1] == "hkjit-bwd":
        _hkjit_bwd_main(sys.argv[2], ast.literal_eval(sys.argv[3]) if len(sys.argv) == 4 else {})
    elif len(sys.argv) >= 3 and sys.argv[1] == "bwd-loop":
        _bwd_loop_main(sys.argv[2:])
    else:
        sys.exit(__doc__)
