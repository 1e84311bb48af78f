"""The `hkjit bench --markdown` report renders the dispatch head-to-head table from its results."""
from hkjit.bench import suite


def test_head_to_head_table_in_markdown():
    floor = "raw cuLaunchKernel from a C loop (the driver's floor)"
    duel = {floor: 2.62, "hkjit.gemm(a, b, out=c), native": 3.63,
            "spread": {floor: (2.5, 2.9), "hkjit.gemm(a, b, out=c), native": (3.5, 3.8)}}
    text = suite.markdown({"env": {"command": "hkjit bench", "date": "2026-11-23"}, "hot_path_head_to_head": duel}, [])
    assert "| raw cuLaunchKernel from a C loop (the driver's floor) | 2.62 | 2.50..2.90 |" in text
    assert "| hkjit.gemm(a, b, out=c), native | 3.63 | 3.50..3.80 |" in text
    assert "| spread |" not in text
