"""`hkjit bench`: the --markdown report renders the dispatch head-to-head table from its results;
--sections and --rounds choose what runs, and bad values are usage errors."""
from hkjit.bench import suite


def test_head_to_head_table_in_markdown():
    floor = "raw cuLaunchKernel from a C loop (the driver's floor)"
    duel = {floor: 2.62, "hkjit.gemm(a, b, out=c), native": 3.63,
            "spread": {floor: (2.5, 2.9), "hkjit.gemm(a, b, out=c), native": (3.5, 3.8)}}
    text = suite.markdown({"env": {"command": "hkjit bench", "date": "2026-11-23"}, "hot_path_head_to_head": duel}, [])
    assert "| raw cuLaunchKernel from a C loop (the driver's floor) | 2.62 | 2.50..2.90 |" in text
    assert "| hkjit.gemm(a, b, out=c), native | 3.63 | 3.50..3.80 |" in text
    assert "| spread |" not in text


def test_sections_choose_what_runs(cache_dir, capsys):
    """--sections: an empty choice measures nothing; "amd" gives the static report (of the op named
    only) and the simulator section, and nothing else (no cold compile, no GPU sections)."""
    assert set(suite.run(["softmax"], sections=())) == {"env"}
    results = suite.run(["softmax"], sections=("amd",), gpu=False)
    assert "cold_compile" not in results and "softmax" not in results
    if not results.get("amd_skipped"):
        assert {r["op"] for r in results["static_amd"]} == {"softmax"}
        assert {r["target"] for r in results["static_amd"]} == {"gfx942", "gfx950"}
        assert all(r["spills"] == 0 for r in results["static_amd"])
        assert "simulator" in results


def test_bad_sections_and_rounds_are_usage_errors(cache_dir, capsys):
    from hkjit import cli
    for argv in (["bench", "--sections", "peers,bogus"], ["bench", "--rounds", "0"]):
        assert cli.main(argv) == 2
        captured = capsys.readouterr()
        assert not captured.out.strip() or captured.out.startswith("hkjit bench on")
        err = captured.err.strip()
        assert len(err.splitlines()) == 1 and ("bogus" in err or "rounds" in err), err
