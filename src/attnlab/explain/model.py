"""A real head and a real multi-head layer of a BERT model, step by step (float64), checked
against the model's own attention maps and output."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from attnlab.explain.walk import MAX_TOKENS, Check, Walkthrough, walk


@dataclass
class _RealLayer:
    path: object
    tok: object
    batch: dict
    tokens: list[str]
    res: object                      # the model's output (weights, hidden states)
    mha: object                      # the layer's MultiheadAttention
    x: torch.Tensor                  # (N, E) the layer's input, float64
    q: torch.Tensor                  # (N, E) X W_q^T + b_q, every head side by side
    k: torch.Tensor
    v: torch.Tensor


def _real_layer(text: str, model: str, layer: int, head: int | None = None) -> _RealLayer:
    """A BERT model's layer ``layer`` on ``text``: its input and its Q, K, V projections in
    float64, with the checks explain needs first (layer and head in range, text not empty,
    at most MAX_TOKENS tokens)."""
    from attnlab.nn.bert import BertModel, load_tokenizer, resolve_model_path

    path = resolve_model_path(model)
    ours = BertModel.from_pretrained(path)
    cfg = ours.config
    limits = [("layer", layer, cfg.num_hidden_layers)]
    if head is not None:
        limits.append(("head", head, cfg.num_attention_heads))
    for name, val, hi in limits:
        if not 0 <= val < hi:
            raise ValueError(f"{name} must be in 0..{hi - 1} for this model, got {val}")
    if not text.strip():
        raise ValueError("--text is empty; give a sentence to walk through")
    tok = load_tokenizer(path)
    batch = tok([text], return_tensors="pt")
    n = batch["input_ids"].shape[1]
    if n > MAX_TOKENS:
        raise ValueError(f"--text has {n} tokens; explain prints every matrix in full and takes "
                         f"at most {MAX_TOKENS}: shorten it, or use attnlab inspect for long text")
    tokens = tok.convert_ids_to_tokens(batch["input_ids"][0].tolist())
    with torch.no_grad():
        res = ours(batch["input_ids"], batch["attention_mask"], return_weights=True,
                   return_hidden_states=True)
        x = res.hidden_states[layer][0].double()                    # (N, E), the layer's input
        mha = ours.encoder.layers[layer].self_attn
        e = mha.embed_dim
        w = mha.in_proj_weight.double().view(3, e, e)               # (q|k|v, E_out, E_in)
        b = mha.in_proj_bias.double().view(3, e)
        q, k, v = (x @ w[i].T + b[i] for i in range(3))             # (N, E) each
    return _RealLayer(path, tok, batch, tokens, res, mha, x, q, k, v)


def model_walk(text: str, model: str = "default", layer: int = 0, head: int = 0) -> Walkthrough:
    """The walk-through for one head of a real BERT-style model on ``text``.

    Q, K, V are that head's projections of the layer's input hidden states, computed by
    attnlab's :class:`~attnlab.nn.BertModel` (float64 for the walk); the checks add the largest
    difference between the formula's A and the attention map of ``transformers``' own
    implementation of the same checkpoint (and of attnlab's BertModel).
    """
    rl = _real_layer(text, model, layer, head)
    path, tokens, batch, n, tok = rl.path, rl.tokens, rl.batch, len(rl.tokens), rl.tok
    unknown = tokens.count(getattr(tok, "unk_token", None) or "[UNK]")
    if unknown:
        wt_note = (f"{unknown} of {n} tokens are {tok.unk_token}: the model's vocabulary does "
                   "not cover this text (for example Chinese in an English model)")
    else:
        wt_note = None
    dh = rl.mha.head_dim
    rows = slice(head * dh, (head + 1) * dh)
    q, k, v = (t[:, rows] for t in (rl.q, rl.k, rl.v))                # (N, D_h) each
    res = rl.res
    wt = walk(tokens, q, k, v)
    if wt_note is not None:
        wt.backends["tokenizer"] = wt_note
    name = "all-MiniLM-L6-v2" if str(model) == "default" else path.name
    wt.source = f"{name}, layer {layer}, head {head}, text {text!r}"
    wt.label = f" ({name}, layer {layer}, head {head})"
    hf_map = _transformers_map(path, batch, layer, head)
    own_map = res.attentions[layer][0, head].double()
    for name, m in (("transformers", hf_map), ("attnlab BertModel", own_map)):
        if m is None:
            wt.backends[name] = "transformers could not load this checkpoint: not compared"
            continue
        err = float((wt.a - m).abs().max())
        wt.checks.append(Check(f"A equals the {name} attention map", err <= 1e-5,
                               f"max |A - map| = {err:.2e}, float32 model"))
    return wt


def _transformers_map(path, batch, layer: int, head: int) -> torch.Tensor | None:
    """The attention map of transformers' own BERT (eager attention, so it returns maps)."""
    from transformers import AutoModel
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:
        hf = AutoModel.from_pretrained(str(path), attn_implementation="eager",
                                       local_files_only=True).eval()
    except (OSError, ValueError):
        return None
    with torch.no_grad():
        maps = hf(**batch, output_attentions=True).attentions
    return maps[layer][0, head].double()


@dataclass
class HeadsWalk:
    """Multi-head attention of one real layer, step by step: the projections, the split into
    heads, each head's attention, the concatenation and the output projection."""

    tokens: list[str]
    x: torch.Tensor                   # (N, E) the layer's input
    q: torch.Tensor                   # (N, E) X W_q^T + b_q, all heads side by side
    heads: list[Walkthrough]          # one per head
    concat: torch.Tensor              # (N, E)
    out: torch.Tensor                 # (N, E) concat W_o^T + b_o
    k: torch.Tensor | None = None     # (N, E) X W_k^T + b_k
    v: torch.Tensor | None = None     # (N, E) X W_v^T + b_v
    reference: torch.Tensor | None = None   # (N, E) the layer's own attention output
    checks: list[Check] = field(default_factory=list)
    source: str = ""

    @property
    def ok(self) -> bool:
        """Whether every check of the layer and of every head passed."""
        return all(c.passed for c in self.checks) and all(h.ok for h in self.heads)


def heads_walk(text: str, model: str = "default", layer: int = 0) -> HeadsWalk:
    """Every step of multi-head attention on a real layer of a BERT model (float64), checked
    against the layer's own attention output."""
    rl = _real_layer(text, model, layer)
    tokens, x, mha, path = rl.tokens, rl.x, rl.mha, rl.path
    q_all, k_all, v_all = rl.q, rl.k, rl.v
    h, dh = mha.num_heads, mha.head_dim
    with torch.no_grad():
        walks = []
        for hh in range(h):
            cols = slice(hh * dh, (hh + 1) * dh)                      # head hh's D_h columns
            walks.append(walk(tokens, q_all[:, cols], k_all[:, cols], v_all[:, cols]))
        concat = torch.cat([wt.o for wt in walks], dim=-1)            # (N, E)
        out = concat @ mha.out_proj.weight.double().T + mha.out_proj.bias.double()
        ref = mha.double()(x[None], x[None], x[None], need_weights=False)[0][0]
        mha.float()
    hw = HeadsWalk(tokens, x, q_all, walks, concat, out, k_all, v_all, ref)
    err = float((out - ref).abs().max())
    hw.checks.append(Check("concat(heads) W_o + b equals the layer's attention output",
                           err <= 1e-10, f"max difference {err:.2e}, float64"))
    name = "all-MiniLM-L6-v2" if str(model) == "default" else path.name
    hw.source = f"{name}, layer {layer}, text {text!r}"
    return hw
