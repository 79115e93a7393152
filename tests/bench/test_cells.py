"""The benchmark harness on tiny sizes (the real numbers live in docs/benchmarks.md)."""

import json

from attnlab.bench import cells as B
from attnlab.cli import main


def test_measure_cell_reports_time_memory_and_setup():
    row = B.measure_cell("blocksparse", "window", 256, backward=True, repeats=1)
    assert row["mode"] == "fwd+bwd" and row["time_s"] > 0 and row["peak_mib"] >= 0


def test_errors_are_small_for_exact_methods_and_stated_for_approximations():
    rows = {(r["group"], r["method"]): r for r in B.errors(n=128)}
    for key in [("window", "tiled"), ("window", "blocksparse"), ("window", "sdpa+dense"),
                ("causal", "auto"), ("full", "sdpa")]:
        assert rows[key]["max_abs"] < 1e-5, key
    assert rows[("full", "linear")]["rel"] > 0.01                   # a different kernel


def test_a_cell_runs_in_its_own_process():
    row = B._run_cell("sdpa", "full", 128, False, 1)
    assert row["method"] == "sdpa" and row["time_s"] > 0 and "error" not in row
    assert "error" in B._run_cell("no-such-method", "full", 128, False, 1)


def test_cli_bench_writes_results_and_plots(tmp_path, monkeypatch, capsys):
    # Cells run in this process here (the subprocess path is tested above): the CLI's table,
    # ratios and figures are what is under test.
    monkeypatch.setattr(B, "_run_cell", B.measure_cell)
    monkeypatch.setattr(B, "GROUPS", {"window": ["sdpa+dense", "blocksparse", "tiled",
                                                 "reference", "sdpa"],
                                      "causal": ["sdpa-causal", "auto"], "full": ["sdpa"]})
    monkeypatch.setattr(B, "tradeoff", lambda n=1024: [
        {"method": "performer", "budget": m, "time_s": 0.01 * m, "rel": 1 / m} for m in (16, 64)])
    monkeypatch.setattr(B, "errors", lambda n=1024: [])
    assert main(["bench", "--n", "128", "--out", str(tmp_path)]) == 0
    data = json.loads((tmp_path / "results.json").read_text())
    assert {"sdpa+dense", "blocksparse", "sdpa-causal", "auto", "sdpa"} <= {
        c["method"] for c in data["cells"]}
    assert all("time_s" in c for c in data["cells"])
    for name in ("time_vs_n.png", "memory_vs_n.png", "error_tradeoff.png"):
        assert (tmp_path / name).stat().st_size > 10_000
    out = capsys.readouterr().out
    assert "SDPA + dense mask takes" in out
    assert "window (1/2)" in out and "…" not in out        # split, never cut, at 80 columns
    assert max(len(line) for line in out.splitlines()) <= 80


def test_cli_bench_rejects_bad_sizes(capsys):
    assert main(["bench", "--n", "8"]) == 2
    assert "--n must be between 64 and 65536" in capsys.readouterr().err
