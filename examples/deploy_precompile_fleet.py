"""Precompile hkjit's kernels for a mixed fleet (MI300X = gfx942, MI355X = gfx950, H100/H200 = sm_90a)
on a machine with no GPU, and write them as one bundle.

    python examples/deploy_precompile_fleet.py [BUNDLE]      # default: ./hkjit-fleet-bundle

Then copy BUNDLE to the fleet and serve from it (examples/deploy_serve_offline.py):

    HKJIT_BUNDLE_PATH=/opt/hkjit/bundle HKJIT_OFFLINE=1 python your_server.py
"""
import subprocess
import sys
import tempfile
from pathlib import Path

MANIFEST = """\
# The specialisations the service uses (docs/deployment.md describes the format).
version = 1
kernels = [
  { op = "gemm", m = 8192, n = 8192, k = 8192, dtype = "bfloat16" },
]

[defaults]
dtype = "bfloat16"

[[kernel]]
op = "gemm"
shapes = ["4096x4096x4096", "4096x14336x4096"]
b_layout = "col"          # the weight is stored transposed
"""


def hkjit_cli(*args) -> int:
    cmd = [sys.executable, "-m", "hkjit", *args]
    print("$", " ".join(cmd[2:]))
    return subprocess.run(cmd).returncode


def main():
    bundle = Path(sys.argv[1] if len(sys.argv) > 1 else "hkjit-fleet-bundle").resolve()
    with tempfile.TemporaryDirectory() as tmp:
        manifest = Path(tmp) / "fleet.toml"
        manifest.write_text(MANIFEST)
        status = hkjit_cli("precompile", "--arch", "gfx942,gfx950,sm_90a", "--shapes", str(manifest),
                           "-o", str(bundle), "-j", "4")
    if status != 0:
        sys.exit(f"precompile failed (exit {status}); the summary above says which and why")
    if hkjit_cli("bundle", "verify", str(bundle)) != 0:
        sys.exit("the bundle did not verify")
    hkjit_cli("bundle", "ls", str(bundle))
    print(f"\nbundle ready: {bundle}\nserve from it with: HKJIT_BUNDLE_PATH={bundle} HKJIT_OFFLINE=1 "
          f"python examples/deploy_serve_offline.py {bundle}")


if __name__ == "__main__":
    main()
