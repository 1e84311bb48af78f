"""sm_90a kernels compiled by NVRTC 13.0 as well: the NVRTC that torch's CUDA 13.0 wheels bring, and
so what a GPU host with such a torch compiles with, while `pip install 'hkjit[cuda]'` brings the newest.
Their ptxas versions allocate registers differently: 13.0 spilled the attention forward's cp.async
producer at 24 registers where 13.5 did not. `.ci/install` unpacks 13.0 into .ci/nvrtc-13.0 (not into
the environment); a fresh process preloads it and compiles every op's default specialisation and the
attention variants that matter, asserting 0 spills and no stack. Skipped where that folder is absent."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LIB = ROOT / ".ci" / "nvrtc-13.0" / "nvidia" / "cu13" / "lib"

pytestmark = pytest.mark.skipif(not (LIB / "libnvrtc.so.13").exists(),
                                reason="NVRTC 13.0 not unpacked (bash .ci/install puts it in .ci/nvrtc-13.0)")

# Attention forward and backward defaults, and the narrower row alignments the cp.async producer serves
ATTENTION = [dict(head_dim=d, causal=c, align=a) for d in (64, 128) for c in (False, True) for a in (16, 8)] + \
            [dict(head_dim=64, causal=True, align=4), dict(head_dim=128, causal=True, varlen=True)]
# Backward-only variants: the TMA producer (24 registers; its dQ warp spilled there until it was made lean)
# and its consumer variants (dkdv_consumer: 1 wait placement, 5 with early dV, 2 stmatrix, 3 and 7 both)
BACKWARD = [dict(head_dim=d, causal=c, dkdv_producer="tma") for d in (64, 128) for c in (False, True)] + \
           [dict(head_dim=d, causal=c, dkdv_consumer=v) for d in (64, 128) for c in (False, True)
            for v in (1, 2, 7)] + \
           [dict(head_dim=128, causal=True, dkdv_consumer=v) for v in (3, 5)]
# (at D64 the TMA entries above build the default, 128 query rows with dkdv_consumer 10) ... and the D64
# variants built without a GPU (dQ by key halves at 64 rows, 128 query rows a step), checked for wgmma
# serialisation too (C7510-C7519: ptxas's own register allocation decides it, which differs by version)
WIDE = [dict(head_dim=64, causal=c, block_q=64, dkdv_consumer=v) for c in (False, True) for v in (10, 11)] + \
       [dict(head_dim=64, causal=c, block_q=128, dkdv_consumer=v) for c in (False, True) for v in (8, 10, 11)]
# The forward's own overrides (lean=1 / 2: walked descriptors, the late rescale; 2: the softmax under
# its own P V; exp_fma: a share of the exponentials as polynomials on the FMA pipe), on the forward alone
FORWARD = [dict(head_dim=d, causal=c, lean=n) for d in (64, 128) for c in (False, True) for n in (1, 2)] + \
          [dict(head_dim=128, causal=True, lean=2, producer="cpasync"), dict(head_dim=64, lean=2, align=4)] + \
          [dict(head_dim=d, causal=c, exp_fma=n, lean=ln) for d in (64, 128) for c in (False, True)
           for n, ln in ((2, 0), (4, 2))] + \
          [dict(head_dim=64, exp_fma=8, dtype="float16", causal=True), dict(head_dim=64, exp_fma=3, align=4, lean=1)]

SCRIPT = r"""
import json, re, sys
import hkjit
from hkjit import compiler, ops, targets
version = compiler.find_compiler(targets.parse("sm_90a"), "nvrtc").version()
out = {"version": version, "kernels": {}}
def record(name, r):
    out["kernels"][name] = [r["spills"], r["stack_bytes"]]
for name in ops.names():
    record(name, hkjit.inspect(name, "sm_90a"))
for params in json.loads(sys.argv[1]):
    for op in ("attention", "attention_bwd_dkdv"):
        record(f"{op} {params}", hkjit.inspect(op, "sm_90a", **params))
for params in json.loads(sys.argv[2]):
    record(f"attention_bwd_dkdv {params}", hkjit.inspect("attention_bwd_dkdv", "sm_90a", **params))
for params in json.loads(sys.argv[3]):
    record(f"attention {params}", hkjit.inspect("attention", "sm_90a", **params))
sys.path.insert(0, sys.argv[5])                  # tests/: the static test's direct compile keeps ptxas's log
from test_attention_backward_hopper_static import B, _compile
out["serialised"] = {}
for params in json.loads(sys.argv[4]):
    cfg, r = _compile(B.DKDV, params)
    record(f"attention_bwd_dkdv {params}", {"spills": r.meta["spills"], "stack_bytes": r.meta["stack_bytes"]})
    out["serialised"][str(params)] = sorted(set(re.findall(r"C751\d", r.log)))
print(json.dumps(out))
"""


def test_every_default_and_the_attention_variants_compile_clean_with_nvrtc_13_0(tmp_path):
    env = {**os.environ, "LD_PRELOAD": str(LIB / "libnvrtc.so.13"),
           "LD_LIBRARY_PATH": os.pathsep.join(filter(None, [str(LIB), os.environ.get("LD_LIBRARY_PATH")])),
           "HKJIT_CACHE_DIR": str(tmp_path / "cache"), "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-c", SCRIPT, json.dumps(ATTENTION), json.dumps(BACKWARD),
                           json.dumps(FORWARD), json.dumps(WIDE), str(ROOT / "tests")], capture_output=True,
                          text=True, env=env, timeout=1200)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["version"] == "13.0", got["version"]      # the preloaded library, not the environment's
    spilled = {name: v for name, v in got["kernels"].items() if v != [0, 0]}
    assert not spilled, f"spills / stack bytes with NVRTC 13.0: {spilled}"
    serialised = {name: codes for name, codes in got["serialised"].items() if codes}
    assert len(got["serialised"]) == len(WIDE) and not serialised, f"wgmma serialised by NVRTC 13.0: {serialised}"
