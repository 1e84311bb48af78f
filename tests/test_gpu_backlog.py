"""tools/gpu_backlog.sh without a GPU: its dry run names every step's command, refuses an unknown step
and an output folder that would break the commands' quoting (the GPU steps themselves run on a GPU)."""
import os
import shlex
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "tools", "gpu_backlog.sh")
STEPS = ("tests", "fwd", "bwd", "topk", "rms", "conv", "gelu", "attn", "norms", "mb")


def dry(*args):
    return subprocess.run(["bash", SCRIPT, *args], capture_output=True, text=True, env=dict(os.environ, DRY="1"))


def test_dry_run_names_every_step_and_parses_as_shell(tmp_path):
    r = dry(str(tmp_path / "out"))
    assert r.returncode == 0, r.stderr
    lines = {ln.split(" ", 1)[0]: ln for ln in r.stdout.splitlines() if "(limit " in ln}
    assert tuple(lines) == STEPS
    for step, line in lines.items():
        words = shlex.split(line.split("): ", 1)[1])      # the command as bash -c will read it
        assert any(w.endswith(".py") or w == "pytest" or w == "hkjit.cli" for w in words), (step, words)
    assert "{'persistent':1}" in lines["fwd"] and "{'block_q':64,'dkdv_consumer':10}" in lines["bwd"]
    assert not (tmp_path / "out" / "environment.txt").exists()      # a dry run runs nothing


def test_unknown_step_and_unsafe_folder_are_refused(tmp_path):
    r = dry(str(tmp_path), "fwd", "nonsense")
    assert "unknown step 'nonsense'" in r.stderr and "nonsense: exit unknown" in r.stdout
    for bad in ("a'b", 'a"b', "a$b", "a`b", "a\\b"):
        r = dry(str(tmp_path / bad), "fwd")
        assert r.returncode == 2 and "OUT_DIR may not hold" in r.stderr and "fwd (limit" not in r.stdout
