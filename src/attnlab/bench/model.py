"""The approximations on a real model: the embedded all-MiniLM-L6-v2 with its attention swapped.

For each method, every attention module of the model runs the approximation at inference
(nothing retrained) and, over a corpus of bundled sentences (:mod:`attnlab.inspect.corpus`),
against the exact model:

* per layer, the relative error ``||A_l - A_l*|| / ||A_l*||`` of the attention block's output
  (the errors of the earlier layers compound into it, as they do in use);
* the cosine similarity of each sentence embedding (mean pooling, the model's own) to the
  exact one;
* on a retrieval task built from the corpus -- passages of ``per_text`` consecutive
  sentences (about 150-250 tokens at the default 6, where LSH's 64-token chunks and the
  windows start to matter); for passage A_i, rank the passages B_j by cosine similarity,
  B_i being the one that followed A_i in the text -- the Spearman
  correlation of each row's similarities with the exact model's, the share of queries whose
  top-1 match is the exact model's, and recall@1 of the true next sentence.

Methods: Performer (FAVOR+, 256 features), linear attention (elu + 1), LSH attention, and
block-sparse attention restricted to a window of ±16 and ±32 tokens.

These methods are meant to be trained with, not swapped in: with ``finetune > 0`` a copy of the
model is also fine-tuned with each approximation for that many steps (AdamW, lr 2e-5, one
passage per step) to reproduce the exact model's embeddings (loss ``1 - cos``) on passages
that are not in the evaluation, and measured again.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import contextmanager

import torch

from attnlab.core.api import attention
from attnlab.core.registry import Capabilities, list_backends, register_backend, unregister_backend
from attnlab.core.spec import AttentionOutput

WINDOWS = (16, 32)
METHODS = ("performer", "linear", "lsh") + tuple(f"window ±{w}" for w in WINDOWS)


def _window_backend(w: int):
    def fn(q, k, v, spec):
        return AttentionOutput(attention(q, k, v, mask=spec.mask, window=(w, w),
                                         scale=spec.scale, backend="blocksparse"))
    return fn


@contextmanager
def swapped(model: torch.nn.Module, method: str):
    """Every attnlab attention module of ``model`` runs ``method`` inside the block."""
    from attnlab.nn.multihead import MultiheadAttention

    if method not in METHODS:
        raise ValueError(f"method must be one of {', '.join(METHODS)}, got {method!r}")
    name = method
    temporary = method.startswith("window")
    if temporary:
        name = f"_study_window_{method.split('±')[1]}"
        register_backend(name, _window_backend(int(method.split("±")[1])),
                         Capabilities(exact=False, masks=frozenset({"bool"})), overwrite=True)
    mods = [m for m in model.modules() if isinstance(m, MultiheadAttention)]
    before = [m.backend for m in mods]
    for m in mods:
        m.backend = name
    try:
        yield
    finally:
        for m, b in zip(mods, before):
            m.backend = b
        if temporary and name in list_backends():
            unregister_backend(name)


def _forward(model, tok, text):
    """Sentence embedding (mean pooling, normalised) and each layer's attention output."""
    from attnlab.nn.multihead import MultiheadAttention

    outs = []
    hooks = [m.register_forward_hook(lambda mod, a, o: outs.append(o[0].detach()))
             for m in model.modules() if isinstance(m, MultiheadAttention)]
    try:
        batch = tok([text], return_tensors="pt")
        with torch.no_grad():
            hidden = model(batch["input_ids"]).last_hidden_state[0]          # (N, E)
    finally:
        for h in hooks:
            h.remove()
    emb = hidden.mean(0)
    return emb / emb.norm(), outs, batch["input_ids"].shape[1]


def _spearman(a: torch.Tensor, b: torch.Tensor) -> float:
    ra, rb = a.argsort().argsort().double(), b.argsort().argsort().double()
    ra, rb = ra - ra.mean(), rb - rb.mean()
    return float((ra @ rb) / (ra.norm() * rb.norm()))


def passages(pairs: int, per_text: int) -> list[tuple[str, str]]:
    """``pairs`` (A, B) of consecutive passages of ``per_text`` sentences each."""
    from attnlab.inspect.corpus import sentences

    sents = sentences()
    need = 2 * pairs * per_text
    if need > len(sents):
        raise ValueError(f"{pairs} pairs of {per_text}-sentence passages need {need} sentences; "
                         f"the bundled corpus has {len(sents)}: ask for fewer")
    chunks = [" ".join(sents[i:i + per_text]) for i in range(0, need, per_text)]
    return [(chunks[2 * i], chunks[2 * i + 1]) for i in range(pairs)]


def _finetune(model, tok, method, texts, targets, steps, seed=0):
    """A copy of ``model`` trained with ``method`` to match ``targets`` (exact embeddings)."""
    import copy

    tuned = copy.deepcopy(model).eval()       # no dropout: the approximations take none
    opt = torch.optim.AdamW(tuned.parameters(), lr=2e-5)
    gen = torch.Generator().manual_seed(seed)
    encoded = [tok([t], return_tensors="pt")["input_ids"] for t in texts]
    with swapped(tuned, method):
        for _ in range(steps):
            i = int(torch.randint(len(texts), (1,), generator=gen))
            emb = tuned(encoded[i]).last_hidden_state[0].mean(0)
            loss = 1 - torch.nn.functional.cosine_similarity(emb, targets[i], dim=0)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
    return tuned


def _measure(model, tok, method, texts, exact, emb, sim, pairs):
    with swapped(model, method):
        got = [_forward(model, tok, t) for t in texts]
    layer_err = torch.zeros(len(exact[0][1]), dtype=torch.float64)
    for (_, ex, _), (_, ap, _) in zip(exact, got):
        for j, (a, b) in enumerate(zip(ex, ap)):
            layer_err[j] += float((b - a).norm() / a.norm())
    layer_err /= len(texts)
    e2 = torch.stack([e for e, _, _ in got])
    cos = (e2 * emb).sum(-1)
    s2 = e2[:pairs] @ e2[pairs:].T
    return {
        "layer_rel_error": [round(float(x), 4) for x in layer_err],
        "cosine_mean": float(cos.mean()), "cosine_min": float(cos.min()),
        "rank_spearman": sum(_spearman(s2[r], sim[r]) for r in range(pairs)) / pairs,
        "top1_agreement": float((s2.argmax(1) == sim.argmax(1)).double().mean()),
        "recall@1": float((s2.argmax(1) == torch.arange(pairs)).double().mean()),
    }


def run(pairs: int = 32, per_text: int = 6, finetune: int = 0, finetune_pairs: int = 12,
        progress: Callable[[int, int], None] | None = None) -> dict:
    """The study on ``pairs`` passage pairs of the bundled corpus; with ``finetune`` steps,
    also after fine-tuning on ``finetune_pairs`` further pairs."""
    from attnlab.nn.bert import load_default

    model, tok = load_default()
    model.eval()
    data = passages(pairs + (finetune_pairs if finetune else 0), per_text)
    train_texts = [t for pair in data[pairs:] for t in pair]
    data = data[:pairs]
    texts = [a for a, _ in data] + [b for _, b in data]
    exact = [_forward(model, tok, t) for t in texts]
    emb = torch.stack([e for e, _, _ in exact])                              # (2P, E)
    sim = emb[:pairs] @ emb[pairs:].T                                        # (P, P)
    lengths = torch.tensor([n for _, _, n in exact], dtype=torch.float64)
    result = {"pairs": pairs, "per_text": per_text, "texts": len(texts),
              "tokens": {"mean": float(lengths.mean()), "min": int(lengths.min()),
                         "max": int(lengths.max())},
              "exact": {"recall@1": float((sim.argmax(1) == torch.arange(pairs)).double()
                                          .mean())}, "methods": {}}
    if finetune:
        targets = [_forward(model, tok, t)[0] for t in train_texts]
        result["finetune"] = {"steps": finetune, "train_texts": len(train_texts)}
    for i, method in enumerate(METHODS):
        result["methods"][method] = _measure(model, tok, method, texts, exact, emb, sim, pairs)
        if finetune:
            tuned = _finetune(model, tok, method, train_texts, targets, finetune)
            result["methods"][method]["finetuned"] = _measure(tuned, tok, method, texts, exact,
                                                              emb, sim, pairs)
        if progress is not None:
            progress(i + 1, len(METHODS))
    return result
