"""Serve from a precompiled bundle with compiling switched off, as a production host would.

    python examples/deploy_precompile_fleet.py /tmp/bundle     # once, anywhere
    python examples/deploy_serve_offline.py /tmp/bundle        # on the serving host

Every specialisation in the bundle resolves without a compiler; one the bundle lacks raises
OfflineMissError naming the op, shapes, dtype, target, key and the manifest line that adds it.
"""
import os
import sys
import time

bundle = sys.argv[1] if len(sys.argv) > 1 else "hkjit-fleet-bundle"
# Configure before hkjit first touches its cache (it reads the environment once per process).
os.environ["HKJIT_BUNDLE_PATH"] = os.path.abspath(bundle)
os.environ["HKJIT_OFFLINE"] = "1"

import hkjit  # noqa: E402
from hkjit import deploy  # noqa: E402


def main():
    records = deploy.describe_bundle(bundle)
    print(f"bundle {bundle}: {len(records)} kernels; offline mode on")
    for r in records:
        t0 = time.perf_counter()
        built = hkjit.build(r["op"], target=r["target"], **r["params"])
        ms = (time.perf_counter() - t0) * 1e3
        assert not built.compiled, "offline mode compiled a kernel"
        print(f"  {r['op']} {r['target']:7s} {r['params']}  -> {len(built.code)} bytes in {ms:.1f} ms, no compile")

    print("\na specialisation the bundle lacks:")
    try:
        hkjit.build("gemm", target="gfx950", m=1000, n=1000, k=1000, dtype="float16")
    except hkjit.OfflineMissError as e:
        print(f"  OfflineMissError: {e}")
    else:
        sys.exit("expected OfflineMissError")


if __name__ == "__main__":
    main()
