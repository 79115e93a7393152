"""The main job, `attnlab inspect`, at full length: wall time, peak memory and report size on a
512-token text and on a 100-text corpus, the time of the figures, and attention flow into one
position at 512 tokens with numba (the first call in a process loads the compiled code) and
with scipy's maximum_flow, one call per token, as the baseline.

    python benchmarks/bench_inspect.py

Each job runs the real console script in a fresh process (the time includes loading the
model); peak memory is the child's maximum resident set size. Texts: a paragraph repeated past
512 tokens (cut with --truncate) and 100 sentences from the docstrings of the standard library
and scikit-learn (the corpus of benchmarks/inspect_corpus.py). Results: JSON in
benchmarks/results/inspect.json and a Markdown table on stdout.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).parent
PARAGRAPH = ("Attention lets every token look at every other token, and the weights say how much "
             "each one matters to the next layer of the model. ")


# The console script's main() in a fresh interpreter that reports its own peak memory.
CHILD = ("import json, resource, sys; from attnlab.cli import main; code = main(sys.argv[1:]); "
         "print(json.dumps({'peak_kib': resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}), "
         "file=sys.stderr); sys.exit(code)")


def _job(args: list[str]) -> dict:
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", CHILD, "inspect", *args], capture_output=True,
                          text=True)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(proc.stderr)
    peak = json.loads(proc.stderr.strip().splitlines()[-1])["peak_kib"]
    return {"time_s": round(wall, 2), "peak_mib": round(peak / 1024, 1)}


def main() -> None:
    from attnlab.bench import machine

    spec = importlib.util.spec_from_file_location("corpus", HERE / "inspect_corpus.py")
    corpus = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(corpus)
    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        text = PARAGRAPH * 20
        rows["512 tokens"] = _job([text, "--truncate", "--out", str(tmp / "long")])
        rows["512 tokens"]["report_mib"] = round(
            (tmp / "long" / "report.html").stat().st_size / 2**20, 2)
        rows["512 tokens, --figures"] = _job([text, "--truncate", "--figures", "--out",
                                              str(tmp / "figs")])
        sents = corpus.sentences()[:100]
        (tmp / "corpus.txt").write_text("\n".join(sents) + "\n")
        rows["100-text corpus"] = _job(["--file", str(tmp / "corpus.txt"), "--out",
                                        str(tmp / "corpus")])
        rows["100-text corpus"]["report_mib"] = round(
            (tmp / "corpus" / "report.html").stat().st_size / 2**20, 2)
        short = _job(["The cat sat on the mat.", "--out", str(tmp / "short")])
        rows["12 tokens"] = short
    import torch

    from attnlab.inspect.attribution import flow_from
    from attnlab.inspect.capture import record
    from attnlab.nn import load_default

    model, tok = load_default()
    batch = tok([PARAGRAPH * 20], return_tensors="pt", truncation=True, max_length=512)
    with torch.no_grad(), record(model) as rec:
        model(batch["input_ids"], batch["attention_mask"])
    maps = rec.maps(0)
    flows = {}
    for name, solver in (("numba, first call", "numba"), ("numba, again", "numba"),
                         ("scipy", "scipy")):
        t0 = time.perf_counter()
        flows[name] = flow_from(maps, 0, solver=solver)
        rows[f"flow into one position, 512 tokens ({name})"] = {
            "time_s": round(time.perf_counter() - t0, 2)}
    assert torch.equal(flows["numba, again"], flows["scipy"])          # the same integers
    rows["flow into one position, 512 tokens (scipy)"]["ratio_to_numba"] = round(
        rows["flow into one position, 512 tokens (scipy)"]["time_s"]
        / rows["flow into one position, 512 tokens (numba, again)"]["time_s"], 1)
    out = HERE / "results" / "inspect.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"machine": machine(), "rows": rows}, indent=1))
    print("| run | time s | peak MiB | report MiB |\n|---|---|---|---|")
    for name, r in rows.items():
        print(f"| {name} | {r['time_s']} | {r.get('peak_mib', '-')} | {r.get('report_mib', '-')} |")


if __name__ == "__main__":
    main()
