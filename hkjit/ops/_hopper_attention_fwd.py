"""The Hopper (sm_90a) half of the attention forward: kernel_sources/attention_fwd_hopper.cuh.

Configuration: one producer warpgroup streams K/V blocks into a ring of shared stages; each
consumer warpgroup owns 64 query rows and runs S = Q Kᵀ (both operands in shared memory) and
O += P V (P from registers) on wgmma, one block deep: block j's softmax runs while P_(j-1) V_(j-1)
is on the tensor cores; with `pingpong` the two consumers also take turns issuing their products.

| head_dim | consumers | query rows / block | block_kv | stages | pingpong | shared memory |
|----------|-----------|--------------------|----------|--------|----------|---------------|
| 64       | 2         | 128                | 64       | 3      | 1        | 65 KiB        |
| 128      | 2         | 128                | 128      | 3      | 1        | 225 KiB       |

(Measured on H100, docs/notes/attention_hopper.md: D64 at block_kv 64 runs 10-19% faster than at
128; D128 at block_kv 128 2-4% faster than at 64; ping-pong 1-5%; a fourth stage nothing.)

Overrides: `block_kv` (64 or 128), `consumers` (1 or 2; three would leave 152 registers a
consumer thread, and S + O alone take 128), `stages` (2 to 4: the pipeline holds stage j - 1 while
it waits for stage j), `pingpong` (0 or 1; 1 needs consumers=2). Rejected before anything
compiles, naming the limit: shared memory beyond the 227 KiB a block may use.
"""

import math

from ..dtypes import DTYPES
from ..errors import InvalidArgumentError
from ..op import Config, check_tiles
from ._attention_args import ForwardArgs, pack_forward
from ..targets import parse as _parse_target

SOURCE = "attention_fwd_hopper.cuh"
TEMPLATE = "attention_fwd_hopper"
TILES = ("block_kv", "consumers", "stages", "pingpong")
SMEM_LIMIT = _parse_target("sm_90a").smem_per_block
_DEFAULTS = {64: dict(block_kv=64, consumers=2, stages=3, pingpong=1),
             128: dict(block_kv=128, consumers=2, stages=3, pingpong=1)}
_CHOICES = {"block_kv": (64, 128), "consumers": (1, 2), "stages": (2, 3, 4), "pingpong": (0, 1)}
PRODUCER_REGS = 72


def _err(msg):
    raise InvalidArgumentError(msg)


def smem_bytes(cfg) -> int:
    """Dynamic shared memory: 1 KiB alignment slack, the K/V ring, each consumer's Q tile, barriers."""
    d, kv = cfg["head_dim"], cfg["block_kv"]
    stage = 2 * kv * d * 2
    consumer = 64 * d * 2
    return 1024 + cfg["stages"] * stage + cfg["consumers"] * consumer + 2 * cfg["stages"] * 8


def consumer_regs(consumers: int) -> int:
    threads = (consumers + 1) * 128
    entry = 65536 // threads // 8 * 8
    return min(240, (entry * (consumers + 1) - PRODUCER_REGS) // consumers // 8 * 8)


def configure(target, p: dict, tiles: dict) -> Config:
    """Validated configuration for attention params `p` (see hkjit.ops.attention) on sm_90a."""
    where = f"attention ({target.arch})"
    check_tiles(where, tiles, TILES)
    if target.arch != "sm_90a":
        _err(f"{where}: the Hopper attention kernel supports sm_90a only")
    d = p["head_dim"]
    chosen = dict(_DEFAULTS[d])
    for name, v in tiles.items():
        if isinstance(v, bool) or v not in _CHOICES[name]:
            _err(f"{where}: {name}={v!r}; valid choices: {', '.join(map(str, _CHOICES[name]))}")
        chosen[name] = v
    if chosen["consumers"] == 1:
        if tiles.get("pingpong") == 1:
            _err(f"{where}: pingpong=1 alternates two consumer warpgroups; it needs consumers=2")
        chosen["pingpong"] = 0
    align = p.get("align", 16)
    if align % 4:
        _err(f"{where}: q, k, v aligned to {align} bytes; base pointers and row strides must be aligned to 4 bytes "
             "(an even number of elements)")
    cfg = Config(target=target.arch, dtype=p["dtype"], head_dim=d, causal=bool(p["causal"]),
                 varlen=bool(p["varlen"]), vec=min(align, 16) // 2, **chosen)
    cfg["block_q"] = 64 * cfg["consumers"]
    smem = smem_bytes(cfg)
    if smem > SMEM_LIMIT:
        _err(f"{where}: shared memory: {cfg['stages']} stages x (K + V) x block_kv={cfg['block_kv']} x head_dim={d} "
             f"plus the Q tiles of {cfg['consumers']} consumers = {smem} bytes exceeds the {SMEM_LIMIT} bytes a "
             "block may use; lower stages or block_kv")
    return cfg


def template_params(cfg) -> dict:
    return {k: cfg[k] for k in ("dtype", "head_dim", "block_kv", "consumers", "stages", "causal", "varlen", "vec",
                                "pingpong")}


def kernel_type(cfg) -> str:
    b = lambda v: "true" if v else "false"
    return (f"{TEMPLATE}<{DTYPES[cfg['dtype']].cpp}, {int(cfg['head_dim'])}, {int(cfg['block_kv'])}, "
            f"{int(cfg['consumers'])}, {int(cfg['stages'])}, {b(cfg['causal'])}, {b(cfg['varlen'])}, {int(cfg['vec'])}, "
            f"{b(cfg['pingpong'])}>")


def threads(cfg) -> int:
    return (cfg["consumers"] + 1) * 128


def dynamic_smem(cfg) -> int:
    return smem_bytes(cfg)


def checks(cfg) -> tuple:
    """Formulas kept on both sides: the C++ type static_asserts these equal Python's."""
    return (("CONSUMER_REGS", consumer_regs(cfg["consumers"])),)


def launch_grid(cfg, p) -> tuple:
    return (math.ceil(p["n_q"] / cfg["block_q"]), p["heads"], p["batch"])


def workspace(cfg, p) -> tuple:
    return 0, 0


Args = ForwardArgs          # the argument block every forward kernel shares


def fill(cfg, *, o, o_strides, **arguments) -> Args:
    if int(o) % 4 or int(o_strides[2]) % 2:
        _err(f"attention: out's base pointer or row stride ({o_strides[2]} elements) is not 4-byte aligned; pass a "
             "contiguous out")
    return pack_forward(cfg["vec"] * 2, cfg["varlen"], o=o, o_strides=o_strides, **arguments)
