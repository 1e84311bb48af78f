"""`hkjit precompile` progress: a rich bar on a terminal (a real pseudo-terminal here), one line per
result in a log or when rich is not installed."""
import os
import sys
import threading

import pytest

import hkjit
from hkjit import cli

from test_deploy import _isolated_env, fake_build, fakecc  # noqa: F401  (fixtures)

MANIFEST = ('kernels = [\n  { op = "gemm", m = 64, n = 64, k = 64 },\n'
            '  { op = "gemm", m = 64, n = 64, k = 64, block_m = 999 },\n  { op = "gemm", m = 32, n = 32, k = 32 },\n]\n')


def _precompile_on_a_terminal(tmp_path, monkeypatch, capsys) -> tuple[int, str, str]:
    """Run `hkjit precompile` with stderr on a pseudo-terminal; (status, stdout, what the terminal got)."""
    manifest = tmp_path / "m.toml"
    manifest.write_text(MANIFEST)
    monkeypatch.setattr(hkjit.api, "build", fake_build)
    monkeypatch.setenv("TERM", "xterm-256color")
    master, slave = os.openpty()
    received = []

    def drain():   # read while the bar draws, so a full terminal buffer never blocks the writer
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError:   # EIO: the terminal's other end closed
                break
            if not chunk:
                break
            received.append(chunk)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    with os.fdopen(slave, "w") as terminal:
        saved, sys.stderr = sys.stderr, terminal
        try:
            status = cli.main(["precompile", "--arch", "gfx942,gfx950", "--shapes", str(manifest),
                               "-o", str(tmp_path / "bundle"), "-j", "2"])
        finally:
            sys.stderr = saved
    reader.join(timeout=10)
    os.close(master)
    return status, capsys.readouterr().out, b"".join(received).decode(errors="replace")


def test_bar_on_a_terminal(tmp_path, monkeypatch, capsys, fakecc):  # noqa: F811
    pytest.importorskip("rich.progress")
    status, out, terminal = _precompile_on_a_terminal(tmp_path, monkeypatch, capsys)
    assert status == 1 and "6 specialisations: 4 compiled, 0 reused, 2 failed" in out
    assert "6/6" in terminal and "compiled 4 reused 0 failed 2" in terminal   # the bar's count and tally
    assert terminal.count("failed: gemm for gfx9") == 2                       # failures above the bar
    assert "[6/6]" not in terminal                                            # not the log lines


def test_plain_lines_on_a_terminal_without_rich(tmp_path, monkeypatch, capsys, fakecc):  # noqa: F811
    monkeypatch.setitem(sys.modules, "rich.console", None)   # `import rich.console` raises ImportError
    monkeypatch.setitem(sys.modules, "rich.progress", None)
    status, out, terminal = _precompile_on_a_terminal(tmp_path, monkeypatch, capsys)
    assert status == 1 and "4 compiled, 0 reused, 2 failed" in out
    lines = [l for l in terminal.splitlines() if l.startswith("[")]
    assert len(lines) == 6 and lines[-1].startswith("[6/6]")
    assert sum("failed" in l for l in lines) == 2
