"""The inspection report at length: file size, inline payload, peak memory, and in Chromium
the first paint and the time until the whole report is drawn.

    python benchmarks/bench_report.py

Two jobs, each in a fresh process (peak resident memory of the whole job: capture, metrics,
report):

* the embedded all-MiniLM-L6-v2 (6 x 12 heads) on 512 tokens of bundled text, with the notebook
  payload (``Inspection._repr_html_``) measured beside the file;
* a random-weight model of GPT-2 small's shape (12 layers x 12 heads, hidden 768, built from
  a config: nothing downloaded) on 1024 tokens.

Goals (issue "Inspect where people work"): 512 tokens inline <= 5 MB; 1024 tokens file
<= 40 MB with first paint <= 3 s.
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import time
from pathlib import Path

OUT = Path(__file__).parent / "results"


def child(job: str, out: Path) -> dict:
    import torch

    from attnlab.inspect import show
    from attnlab.inspect.corpus import sentences

    text = " ".join(sentences()[:120])
    t0 = time.perf_counter()
    if job == "embedded-512":
        ins = show("default", text=text, truncate=True)
    else:
        import transformers as tf

        from attnlab.nn.bert import default_model_path

        torch.manual_seed(0)
        model = tf.GPT2LMHeadModel(tf.GPT2Config(n_layer=12, n_head=12, n_embd=768,
                                                 n_positions=1024, vocab_size=30522))
        tok = tf.AutoTokenizer.from_pretrained(str(default_model_path()), local_files_only=True)
        tok.model_max_length = 1024
        ins = show(model, tok, text, truncate=True, name="GPT-2 small shape (random)")
    inline = ins._repr_html_()
    path = ins.save(out / f"{job}.html")
    return {"job": job, "tokens": len(ins.tokens), "seconds": time.perf_counter() - t0,
            "file_mb": path.stat().st_size / 1e6, "inline_mb": len(inline.encode()) / 1e6,
            "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def browser(path: Path) -> dict:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from tests.helpers import open_report

    t0 = time.perf_counter()
    with open_report(path, viewport=(1300, 1000), timeout_ms=120_000) as r:
        drawn = time.perf_counter() - t0
        paint = r.page.evaluate(
            "() => performance.getEntriesByName('first-paint')[0].startTime") / 1000
        r.page.screenshot(path=str(path.with_suffix(".png")))
        errors = list(r.errors)
    return {"first_paint_s": paint, "drawn_s": drawn, "errors": errors}


def main() -> int:
    if len(sys.argv) == 4 and sys.argv[1] == "--child":
        print(json.dumps(child(sys.argv[2], Path(sys.argv[3]))))
        return 0
    from attnlab.bench import machine

    OUT.mkdir(parents=True, exist_ok=True)
    rows = []
    for job in ("embedded-512", "gpt2-shape-1024"):
        proc = subprocess.run([sys.executable, __file__, "--child", job, str(OUT)],
                              capture_output=True, text=True, timeout=1800)
        if proc.returncode:
            print(proc.stderr[-2000:], file=sys.stderr)
            return 1
        row = json.loads(proc.stdout.strip().splitlines()[-1])
        row.update(browser(OUT / f"{job}.html"))
        rows.append(row)
        print(json.dumps(row), flush=True)
    (OUT / "report.json").write_text(json.dumps({"machine": machine(), "rows": rows},
                                                indent=1) + "\n")
    print("| job | tokens | job s | peak MB | file MB | inline MB | first paint s | drawn s |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['job']} | {r['tokens']} | {r['seconds']:.1f} | {r['peak_mb']:.0f} | "
              f"{r['file_mb']:.1f} | {r['inline_mb']:.1f} | {r['first_paint_s']:.2f} | "
              f"{r['drawn_s']:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
