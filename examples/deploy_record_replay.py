"""Record the specialisations a run uses, then precompile exactly those.

    python examples/deploy_record_replay.py

Step 1 runs a workload with HKJIT_RECORD=recorded.toml: every specialisation hkjit builds is appended
to that manifest (once; several processes may share the file). Step 2 replays the file with
`hkjit precompile`, for the recorded targets or, with --arch, for others too.
"""
import os
import subprocess
import sys
import tempfile
from pathlib import Path

WORKLOAD = """
import hkjit
for m in (1024, 2048, 1024):                 # the repeat is recorded once
    hkjit.build("gemm", target="gfx950", m=m, n=4096, k=4096, dtype="bfloat16")
"""


def main():
    with tempfile.TemporaryDirectory() as tmp:
        recorded = Path(tmp) / "recorded.toml"
        env = dict(os.environ, HKJIT_RECORD=str(recorded))
        subprocess.run([sys.executable, "-c", WORKLOAD], env=env, check=True)
        print(f"--- {recorded.name} ---\n{recorded.read_text()}")
        cmd = [sys.executable, "-m", "hkjit", "precompile", "--shapes", str(recorded),
               "--arch", "gfx950,gfx942", "-o", str(Path(tmp) / "bundle.zip")]
        print("$", " ".join(cmd[2:]))
        sys.exit(subprocess.run(cmd).returncode)


if __name__ == "__main__":
    main()
