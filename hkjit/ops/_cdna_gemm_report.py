"""The CDNA GEMM's static report: every default configuration of kernel_sources/gemm_cdna.hip
compiled through hkjit's clang driver with its pinned flags, and the figures
tests/test_cdna_gemm_static.py checks and tools/cdna_static_report.py prints (registers, LDS,
occupancy, the main loop's instruction counts, MFMAs per K-step against the tile arithmetic)."""

import tempfile
from pathlib import Path

from .. import compiler, spec as spec_mod, static, targets
from ..errors import CompilerNotFoundError
from . import _cdna_gemm as G

CDNA_GEMM_LAYOUTS = (("ABt", True, True), ("AB", True, False), ("AtB", False, True), ("AtBt", False, False))
# Representative shapes that select each default tier (see _cdna_gemm's table).
CDNA_GEMM_TIER_SHAPES = {"gfx950": ((8192, 8192, 8192), (2048, 2048, 2048), (512, 512, 512)),
                         "gfx942": ((8192, 8192, 8192), (2304, 2304, 2048), (512, 512, 512))}


def cdna_gemm_default_configs(archs=("gfx950", "gfx942"), all_dtypes=False) -> list[tuple[str, str, dict]]:
    """(arch, label, cfg) for every default configuration: each tier × each A/B layout, bf16 → bf16,
    plus (all_dtypes) every input/output dtype pair."""
    pairs = [(i, o) for i in G.IN_DTYPES for o in G.OUT_DTYPES] if all_dtypes else [("bfloat16", "bfloat16")]
    out = []
    for arch in archs:
        target = targets.parse(arch)
        for M, N, K in CDNA_GEMM_TIER_SHAPES[arch]:
            for lname, a_kmajor, b_kmajor in CDNA_GEMM_LAYOUTS:
                for in_dtype, out_dtype in pairs:
                    cfg = G.choose_config(M, N, K, a_kmajor, b_kmajor, in_dtype, out_dtype, target, {})
                    label = (f"{cfg['block_m']}x{cfg['block_n']}x{cfg['block_k']} w{cfg['waves']} "
                             f"{lname} {in_dtype[:4]}->{out_dtype[:4]}")
                    out.append((arch, label, cfg))
    return out


def cdna_gemm_static(arch: str, cfg: dict) -> dict:
    """Compile one CDNA GEMM configuration with hkjit's clang driver and measure it: `notes`
    (static.amd_kernel_notes), `stats` (static.amd_gemm_loop_stats), `occupancy` (waves per SIMD),
    `blocks_per_cu`, and the MFMAs per K-step per block found (`mfma_per_kstep_block`) and
    implied by the tile arithmetic (`mfma_expected`)."""
    target = targets.parse(arch)
    unit = (f'#include "{G.SOURCE}"\nusing hkjit_kernel = {G.TEMPLATE}<{G.template_args(cfg)}>;\n'
            f"HK_ENTRY({G.KERNEL}, hkjit_kernel)\n")
    clang = compiler.find_compiler(target, "clang")
    with tempfile.TemporaryDirectory(prefix="hkjit-static-") as tmp:
        source = Path(tmp) / "gemm_cdna_unit.hip"
        source.write_text(unit)
        code = clang.compile(unit, source, target, [spec_mod.include_dir(), spec_mod.kernel_sources_dir()],
                             G.KERNEL).code
    insts = static.amd_disassembly(code, target.arch)
    if insts is None:
        raise CompilerNotFoundError("llvm-objdump (LLVM >= 20) not found: apt-get install llvm-22")
    notes, stats = static.amd_kernel_notes(code), static.amd_gemm_loop_stats(insts)
    occ = static.amd_occupancy(target, notes["vgpr_count"], notes.get("agpr_count", 0),
                        notes["group_segment_fixed_size"], cfg["waves"])
    expected = cfg["block_m"] * cfg["block_n"] * cfg["block_k"] // (cfg["mfma_m"] ** 2 * cfg["mfma_k"])
    return dict(notes=notes, stats=stats, occupancy=occ["waves_per_simd"], blocks_per_cu=occ["blocks_per_cu"],
                mfma_per_kstep_block=stats["mfma_loop"] * cfg["waves"], mfma_expected=expected)
