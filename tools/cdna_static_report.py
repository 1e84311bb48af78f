#!/usr/bin/env python3
"""Static report of the CDNA GEMM (kernel_sources/gemm_cdna.hip): builds every default
configuration for gfx942 and gfx950 with hkjit's clang driver and prints registers, LDS, spills,
occupancy, MFMA counts (total, and per K-step from the main loop of the disassembly) and memory
instruction counts (the figures come from `hkjit.ops._cdna_gemm_report`). Nothing here needs an AMD GPU.

    python tools/cdna_static_report.py [--arch gfx950] [--jobs 4] [--all-dtypes] [--markdown]
"""

import argparse
import concurrent.futures as cf
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hkjit.ops import _cdna_gemm_report as report  # noqa: E402
from hkjit.errors import CompilerNotFoundError  # noqa: E402
from hkjit.ops import _cdna_gemm as G  # noqa: E402
from hkjit.targets import parse as parse_target  # noqa: E402

HEAD = ("arch", "config", "VGPR/AGPR/SGPR", "LDS", "spills v/s", "occ", "MFMA total",
        "MFMA/K-step/block (expect)", "MFMA", "DMA/K-step/wave", "ds_read/K-step/wave", "barriers", "check")


def row(arch, label, cfg, r) -> tuple[tuple, bool]:
    n, s = r["notes"], r["stats"]
    ok = (n["vgpr_spill_count"] == 0 and n["sgpr_spill_count"] == 0 and s["scratch"] == 0
          and n["group_segment_fixed_size"] <= G.lds_bytes(cfg) <= parse_target(arch).smem_per_block
          and r["mfma_per_kstep_block"] == r["mfma_expected"] and "hkjit_gemm" in n["symbols"]
          and s["lds_dma_soffset"] == 0)
    ds = " ".join(f"{k.replace('ds_read_', '')}:{v}" for k, v in s["ds_read_loop"].items())
    return (arch, label, f"{n['vgpr_count']}/{n.get('agpr_count', 0)}/{n['sgpr_count']}",
            f"{n['group_segment_fixed_size'] // 1024}K", f"{n['vgpr_spill_count']}/{n['sgpr_spill_count']}",
            f"{r['occupancy']:g}", f"{s['mfma_total']}",
            f"{s['mfma_loop']}x{cfg['waves']}={r['mfma_per_kstep_block']} ({r['mfma_expected']})",
            s["mfma_ops"][0].replace("v_mfma_f32_", ""), f"{s['lds_dma_loop']}", ds, f"{s['barrier_loop']}",
            "ok" if ok else "FAIL"), ok


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arch", action="append", choices=("gfx942", "gfx950"))
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--all-dtypes", action="store_true")
    ap.add_argument("--markdown", action="store_true")
    args = ap.parse_args(argv)
    cfgs = report.cdna_gemm_default_configs(tuple(args.arch or ("gfx950", "gfx942")), args.all_dtypes)
    rows, bad = [], 0
    try:
        with cf.ThreadPoolExecutor(args.jobs) as ex:
            futs = [ex.submit(report.cdna_gemm_static, arch, cfg) for arch, _, cfg in cfgs]
            for (arch, label, cfg), f in zip(cfgs, futs):
                r, ok = row(arch, label, cfg, f.result())
                rows.append(r)
                bad += not ok
    except CompilerNotFoundError as e:
        print(f"hkjit: {e}", file=sys.stderr)
        return 2
    if args.markdown:
        print("| " + " | ".join(HEAD) + " |")
        print("|" + "---|" * len(HEAD))
        for r in rows:
            print("| " + " | ".join(r) + " |")
    else:
        widths = [max(len(str(x)) for x in col) for col in zip(HEAD, *rows)]
        for r in (HEAD,) + tuple(rows):
            print("  ".join(str(x).ljust(w) for x, w in zip(r, widths)))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
