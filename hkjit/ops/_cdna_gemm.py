"""CDNA (gfx942, gfx950) GEMM: tile configuration, validation, template arguments, grid and
kernel arguments for kernel_sources/gemm_cdna.hip.

Default tiles (first row whose grid fills the chip, else the last row):

| target | block_m x block_n x block_k | waves | stages | mfma     | LDS     | use when                         |
|--------|-----------------------------|-------|--------|----------|---------|----------------------------------|
| gfx950 | 256 x 256 x 64              | 8     | 2      | 16x16x32 | 128 KiB | ceil(M/256)*ceil(N/256) >= 256 CUs |
| gfx950 | 128 x 128 x 64              | 4     | 2      | 16x16x32 |  64 KiB | ceil(M/128)*ceil(N/128) >= 256     |
| gfx950 |  64 x  64 x 64              | 4     | 2      | 16x16x32 |  32 KiB | otherwise                          |
| gfx942 | 256 x 256 x 32              | 8     | 2      | 16x16x16 |  64 KiB | ceil(M/256)*ceil(N/256) >= 304 CUs |
| gfx942 | 128 x 128 x 64              | 4     | 2      | 16x16x16 |  64 KiB | ceil(M/128)*ceil(N/128) >= 304     |
| gfx942 |  64 x  64 x 64              | 4     | 2      | 16x16x16 |  32 KiB | otherwise                          |

group_m defaults to 8. 8 waves with 2 stages run the ping-pong schedule. Direct-to-LDS loads
are 16 bytes per lane on gfx950 when `alignment` (the byte alignment the caller guarantees for
both base pointers and every leading-dimension stride of A and B) allows, else 4 bytes.
"""

import ctypes
import math

from ..errors import InvalidArgumentError
from ..dtypes import DTYPES, FLOAT_OUTPUTS, MMA_INPUTS, dtype as _dtype
from ..op import Config, check_tiles
from ..targets import Target, parse as _parse_target

SOURCE = "gemm_cdna.hip"
TEMPLATE = "gemm_cdna"
KERNEL = "hkjit_gemm"

OVERRIDES = ("block_m", "block_n", "block_k", "waves", "stages", "group_m", "mfma")
IN_DTYPES = MMA_INPUTS
OUT_DTYPES = FLOAT_OUTPUTS

_MFMA = {  # (M=N, K) per target, bf16/fp16 inputs
    "gfx942": ((16, 16), (32, 8)),
    "gfx950": ((16, 16), (32, 8), (16, 32), (32, 16)),
}
_DEFAULT_MFMA = {"gfx942": (16, 16), "gfx950": (16, 32)}
_TIERS = {
    "gfx950": ((256, 256, 64, 8), (128, 128, 64, 4), (64, 64, 64, 4)),
    "gfx942": ((256, 256, 32, 8), (128, 128, 64, 4), (64, 64, 64, 4)),
}
_MAX_LOAD = {"gfx942": 4, "gfx950": 16}
# Swizzle units of the shared tiles (include/hk/cdna/types.hpp): K-major, MN-major.
_SWZ_UNIT = {"gfx942": (8, 32), "gfx950": (16, 16)}
REG_BUDGET = 256       # VGPR+AGPR per lane that keeps 8-wave blocks at 2 waves/SIMD, 0 spills
REG_OVERHEAD = 48      # addresses, offsets, loop state beyond accumulators + fragments (measured)
_WAVES = (4, 8)
_STAGES = (1, 2)


def _err(msg):
    raise InvalidArgumentError(msg)


def _mfma_name(mi, mk):
    return f"{mi}x{mi}x{mk}"


def _parse_mfma(value, arch):
    shapes = _MFMA[arch]
    names = ", ".join(_mfma_name(*s) for s in shapes)
    if isinstance(value, str):
        parts = value.lower().split("x")
        if len(parts) == 3 and all(p.isdigit() for p in parts) and parts[0] == parts[1]:
            shape = (int(parts[0]), int(parts[2]))
            if shape in shapes:
                return shape
    elif isinstance(value, (tuple, list)) and len(value) in (2, 3) and all(isinstance(v, int) for v in value):
        shape = (value[0], value[-1])
        if shape in shapes and (len(value) == 2 or value[0] == value[1]):
            return shape
    _err(f"mfma={value!r} is not a bf16/fp16 MFMA shape of {arch}; valid choices: {names}")


def _int_override(name, value):
    if isinstance(value, bool) or not isinstance(value, int):
        _err(f"{name} must be an int, got {value!r}")
    if value < 1:
        _err(f"{name} must be >= 1, got {value}")
    return value


def _pow2(n):
    return n > 0 and (n & (n - 1)) == 0


def est_regs(cfg):
    """Estimated VGPR+AGPR per lane: fp32 accumulators + one A half and the B fragment + overhead."""
    wn = cfg["waves"] // 2
    acc = cfg["block_m"] // 2 * (cfg["block_n"] // wn) // 64
    frag = (cfg["block_m"] // 4 + cfg["block_n"] // wn) * cfg["block_k"] * 2 // 4 // 64
    return acc + frag + REG_OVERHEAD


def lds_bytes(cfg):
    return cfg["stages"] * (cfg["block_m"] + cfg["block_n"]) * cfg["block_k"] * 2


def _validate(cfg, target):
    arch = target.arch
    bm, bn, bk, w, st = cfg["block_m"], cfg["block_n"], cfg["block_k"], cfg["waves"], cfg["stages"]
    mi, mk = cfg["mfma_m"], cfg["mfma_k"]
    if w not in _WAVES:
        _err(f"waves={w}: the CDNA GEMM runs 4 waves (2x2) or 8 waves (2x4, ping-pong); valid choices: 4, 8")
    if w * 64 > target.max_threads:
        _err(f"waves={w}: {w * 64} threads exceed the {target.max_threads}-thread block limit of {arch}")
    if st not in _STAGES:
        _err(f"stages={st}: valid choices: 1, 2 (double-buffered LDS)")
    if not 1 <= cfg["group_m"] <= 256:
        _err(f"group_m={cfg['group_m']}: valid: 1 .. 256 (block rows per swizzle group)")
    wn = w // 2
    if bm % (4 * mi):
        _err(f"block_m={bm}: must be a multiple of {4 * mi} (2 wave rows x 2 halves x MFMA {mi}); "
             f"valid choices e.g. {', '.join(str(4 * mi * k) for k in (1, 2, 4, 8))}")
    if bn % (wn * mi):
        _err(f"block_n={bn}: must be a multiple of {wn * mi} ({wn} wave columns x MFMA {mi}); "
             f"valid choices e.g. {', '.join(str(wn * mi * k) for k in (1, 2, 4, 8))}")
    if bk % mk:
        _err(f"block_k={bk}: must be a multiple of the MFMA K ({mk}); valid choices e.g. {mk}, {2 * mk}, {4 * mk}")
    lb = cfg["load_bytes"]
    unit_k, unit_mn = _SWZ_UNIT[arch]
    for name, mn, kmajor in (("A", bm, cfg["a_kmajor"]), ("B", bn, cfg["b_kmajor"])):
        row_bytes = bk * 2 if kmajor else mn * 2
        unit = unit_k if kmajor else unit_mn
        what = "block_k" if kmajor else ("block_m" if name == "A" else "block_n")
        if row_bytes % unit or not _pow2(row_bytes // unit):
            _err(f"{what}: a {'K' if kmajor else 'MN'}-major {name} tile row of {row_bytes} bytes must be a "
                 f"power-of-two number of {unit}-byte swizzle units on {arch} (e.g. {what} = "
                 f"{unit // 2}, {unit}, {2 * unit}, ...)")
        tile = mn * bk * 2
        per_inst = 64 * lb * w
        if tile % per_inst:
            _err(f"{name} tile {mn}x{bk} ({tile} bytes) must split into whole direct-to-LDS loads of "
                 f"{w} waves x 64 lanes x {lb} bytes = {per_inst} bytes; use a larger tile or fewer waves")
    lds = lds_bytes(cfg)
    if lds > target.smem_per_block:
        _err(f"LDS limit: stages*(block_m+block_n)*block_k*2 = {lds} bytes exceeds the "
             f"{target.smem_per_block}-byte LDS of {arch}; reduce block_k, the block or stages")
    regs = est_regs(cfg)
    budget = REG_BUDGET if w == 8 else 512
    if regs > budget:
        _err(f"VGPR budget: about {regs} registers per lane (accumulators {bm // 2 * (bn // wn) // 64}) "
             f"exceed {budget} for {w} waves; use a smaller block_m/block_n/block_k")


def template_params(cfg) -> dict:
    """The parameters the kernel is specialised on (the rest of the config derives from them)."""
    return {k: cfg[k] for k in ("in_dtype", "out_dtype", "block_m", "block_n", "block_k", "waves", "stages",
                                "group_m", "a_kmajor", "b_kmajor", "mfma_m", "mfma_k", "load_bytes")}


def choose_config(M, N, K, a_kmajor, b_kmajor, in_dtype, out_dtype, target, overrides=None, alignment=16,
                  num_sms=None):
    """Validated configuration dict for an M x N x K GEMM on a CDNA target.

    a_kmajor: A (M x K) has unit stride along K (row-major A); else along M.
    b_kmajor: B (K x N) has unit stride along K (B given as N x K row-major, "A @ B.T"); else along N.
    alignment: bytes to which both base pointers and the non-unit strides of A and B (in bytes)
    are aligned; picks the direct-to-LDS width (16 on gfx950 when alignment % 16 == 0, else 4).
    overrides: any of block_m, block_n, block_k, waves, stages, group_m, mfma ("16x16x32").
    num_sms: CU count used by the tier rule (default: the target's).
    Raises InvalidArgumentError naming the limit and the valid choices."""
    target = _parse_target(target) if not isinstance(target, Target) else target
    if target.arch not in _MFMA:
        _err(f"target {target}: the CDNA GEMM supports gfx942 and gfx950")
    arch = target.arch
    for name, v in (("M", M), ("N", N), ("K", K)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            _err(f"{name} must be an int >= 1, got {v!r}")
    ind, outd = _dtype(in_dtype).name, _dtype(out_dtype).name
    if ind not in IN_DTYPES:
        _err(f"in_dtype {ind}: the CDNA GEMM takes {', '.join(IN_DTYPES)} inputs")
    if outd not in OUT_DTYPES:
        _err(f"out_dtype {outd}: the CDNA GEMM writes {', '.join(OUT_DTYPES)}")
    overrides = dict(overrides or {})
    unknown = sorted(set(overrides) - set(OVERRIDES))
    if unknown:
        _err(f"unknown tile override(s) {', '.join(unknown)}; valid names: {', '.join(OVERRIDES)}")
    if alignment % 4:
        _err(f"alignment={alignment}: direct-to-LDS loads need base pointers and leading dimensions "
             f"aligned to at least 4 bytes (an even number of 16-bit elements)")

    for bm, bn, bk, w in _TIERS[arch]:
        if math.ceil(M / bm) * math.ceil(N / bn) >= (num_sms or target.compute_units):
            break
    mi, mk = _DEFAULT_MFMA[arch]
    cfg = Config(block_m=bm, block_n=bn, block_k=bk, waves=w, stages=2, group_m=8)
    for name in OVERRIDES:
        if name in overrides and name != "mfma":
            cfg[name] = _int_override(name, overrides[name])
    if "mfma" in overrides:
        mi, mk = _parse_mfma(overrides["mfma"], arch)
    load_bytes = 16 if (_MAX_LOAD[arch] >= 16 and alignment % 16 == 0) else 4
    cfg.update(target=arch, in_dtype=ind, out_dtype=outd, a_kmajor=bool(a_kmajor), b_kmajor=bool(b_kmajor),
               mfma_m=mi, mfma_k=mk, load_bytes=load_bytes)
    _validate(cfg, target)
    cfg["lds_bytes"] = lds_bytes(cfg)
    cfg["pingpong"] = cfg["waves"] == 8 and cfg["stages"] == 2
    return cfg


def template_args(cfg) -> str:
    b = lambda v: "true" if v else "false"
    ints = [cfg[k] for k in ("block_m", "block_n", "block_k", "waves", "stages", "group_m")]
    for v in ints + [cfg["mfma_m"], cfg["mfma_k"], cfg["load_bytes"]]:
        if isinstance(v, bool) or not isinstance(v, int):
            raise InvalidArgumentError(f"template argument {v!r} is not an int")
    return ", ".join([DTYPES[cfg["in_dtype"]].cpp, DTYPES[cfg["out_dtype"]].cpp] + [str(v) for v in ints]
                     + [b(cfg["a_kmajor"]), b(cfg["b_kmajor"]), str(cfg["mfma_m"]), str(cfg["mfma_k"]),
                        str(cfg["load_bytes"])])


def kernel_type(cfg) -> str:
    """The C++ kernel type hkjit instantiates: `gemm_cdna<...>`."""
    return f"{TEMPLATE}<{template_args(cfg)}>"


def threads(cfg) -> int:
    return cfg["waves"] * 64


def dynamic_smem(cfg) -> int:
    return 0   # static LDS (reported in the code object's group_segment_fixed_size)


def grid(M, N, K, cfg, num_sms=None):
    return (math.ceil(M / cfg["block_m"]) * math.ceil(N / cfg["block_n"]), 1, 1)


class Args(ctypes.Structure):
    """Mirror of gemm_cdna<...>::args (natural C alignment: 128 bytes)."""
    _fields_ = [
        ("a", ctypes.c_void_p), ("b", ctypes.c_void_p), ("c", ctypes.c_void_p),
        ("bias", ctypes.c_void_p), ("cin", ctypes.c_void_p),
        ("a_stride_m", ctypes.c_longlong), ("a_stride_k", ctypes.c_longlong),
        ("b_stride_k", ctypes.c_longlong), ("b_stride_n", ctypes.c_longlong),
        ("c_stride_m", ctypes.c_longlong), ("c_stride_n", ctypes.c_longlong),
        ("cin_stride_m", ctypes.c_longlong), ("cin_stride_n", ctypes.c_longlong),
        ("M", ctypes.c_int), ("N", ctypes.c_int), ("K", ctypes.c_int),
        ("alpha", ctypes.c_float), ("beta", ctypes.c_float),
    ]


def make_args(cfg, a_ptr, a_strides, b_ptr, b_strides, c_ptr, c_strides, M, N, K,
              bias_ptr=0, cin_ptr=0, cin_strides=(0, 0), alpha=1.0, beta=0.0, *, ldc_in=None) -> Args:
    """Kernel arguments. a_strides = (stride_m, stride_k) of A (M x K); b_strides = (stride_k,
    stride_n) of B (K x N); c_strides / cin_strides = (stride_m, stride_n); all in elements.
    A single int instead of a pair is the leading dimension of the configured layout (unit
    stride on the other axis; C and Cin row-major); ldc_in= is Cin's leading dimension.
    Checks the layout the configuration was built for and the alignment/size limits of the
    direct-to-LDS loads."""
    if isinstance(a_strides, int):
        a_strides = (a_strides, 1) if cfg["a_kmajor"] else (1, a_strides)
    if isinstance(b_strides, int):
        b_strides = (1, b_strides) if cfg["b_kmajor"] else (b_strides, 1)
    if isinstance(c_strides, int):
        c_strides = (c_strides, 1)
    if ldc_in is not None:
        cin_strides = (int(ldc_in), 1)
    sam, sak = (int(s) for s in a_strides)
    sbk, sbn = (int(s) for s in b_strides)
    lb, es = cfg["load_bytes"], 2
    # (name, unit stride, its extent, row stride between shared-tile rows, rows per tile)
    checks = (
        ("A", sak if cfg["a_kmajor"] else sam, K if cfg["a_kmajor"] else M,
         sam if cfg["a_kmajor"] else sak, cfg["block_m"] if cfg["a_kmajor"] else cfg["block_k"], a_ptr),
        ("B", sbk if cfg["b_kmajor"] else sbn, K if cfg["b_kmajor"] else N,
         sbn if cfg["b_kmajor"] else sbk, cfg["block_n"] if cfg["b_kmajor"] else cfg["block_k"], b_ptr),
    )
    for name, unit, extent, row, rows, ptr in checks:
        if unit != 1 and extent != 1:
            _err(f"{name}: the configuration reads {name} with unit stride along "
                 f"{'K' if (cfg['a_kmajor'] if name == 'A' else cfg['b_kmajor']) else 'M/N'}, got strides "
                 f"{a_strides if name == 'A' else b_strides}")
        if row < 0:
            _err(f"{name}: negative strides are not supported")
        if (int(ptr or 0) % lb) or ((row * es) % lb):
            _err(f"{name}: direct-to-LDS loads of {lb} bytes need the base pointer and the leading "
                 f"dimension ({row} elements) aligned to {lb} bytes; pass alignment= to choose_config")
        if row * rows * es >= 2 ** 31:
            _err(f"{name}: leading dimension {row} too large for 32-bit buffer offsets over a "
                 f"{rows}-row tile (limit {2 ** 31 // (rows * es)} elements)")
    return Args(int(a_ptr or 0), int(b_ptr or 0), int(c_ptr or 0), int(bias_ptr or 0), int(cin_ptr or 0),
                sam, sak, sbk, sbn, int(c_strides[0]), int(c_strides[1]),
                int(cin_strides[0]), int(cin_strides[1]), int(M), int(N), int(K), float(alpha), float(beta))


# ---- the interface every arch module of gemm implements (see hkjit/ops/gemm.py) --------------------
TILES = OVERRIDES


def configure(target, p: dict, tiles: dict) -> Config:
    """Config for validated gemm params `p` (hkjit.ops.gemm.GEMM.params) and tile overrides. Bias
    and C_in are run-time arguments here (null pointers when absent)."""
    check_tiles(f"gemm ({target.arch})", tiles, TILES)
    align = min(p["a_align"], p["b_align"])
    if align < 4:
        _err(f"gemm on {target.arch}: operands aligned to {align} bytes; direct-to-LDS loads need base "
             "pointers and leading dimensions aligned to 4 bytes (hkjit.gemm copies such operands itself)")
    return choose_config(p["m"], p["n"], p["k"], p["a_layout"] == "row", p["b_layout"] == "col", p["dtype"],
                         p["out_dtype"], target, tiles, alignment=align, num_sms=p["num_sms"])


def checks(cfg) -> tuple:
    """Formulas kept on both sides: the C++ type static_asserts these equal Python's."""
    return (("lds_bytes", lds_bytes(cfg)),)


def launch_grid(cfg, p) -> tuple:
    return grid(p["m"], p["n"], p["k"], cfg)


def workspace(cfg, p) -> tuple:
    return 0, 0


def fill(cfg, *, a, b, out, bias, c, a_strides, b_strides, ldc, ldc_in, m, n, k, alpha, beta, workspace,
         scratch=0) -> Args:
    return make_args(cfg, a, a_strides, b, b_strides, out, (ldc, 1), m, n, k, bias_ptr=bias, cin_ptr=c,
                     cin_strides=(ldc_in, 1), alpha=alpha, beta=beta)
