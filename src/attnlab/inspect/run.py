"""The inspection job: capture a BERT-style model's attention on texts, measure, label, attribute.

:func:`inspect_texts` runs attnlab's :class:`~attnlab.nn.BertModel` (the embedded
all-MiniLM-L6-v2 by default) under :func:`~attnlab.inspect.record` on one text, a sentence pair
or a corpus, and returns an :class:`Inspection`: the first text's maps and attributions, and
the metrics, head distances and taxonomy averaged over all texts.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from attnlab.inspect.attribution import (
    TARGETS,
    bert_gradient_attention,
    flow,
    flow_from,
    flow_matrix_limit,
    max_flow_solver,
    rollout,
)
from attnlab.inspect.capture import record
from attnlab.inspect.metrics import (
    HeadMetrics,
    embed_2d,
    head_metrics,
    js_distances,
    layer_distance_summary,
)
from attnlab.inspect.taxonomy import Taxonomy, label_heads

FLOW_FROM_AUTO_TOKENS = 128      # flow into one position with scipy: about 1 s at 128 tokens

DEFAULT_TEXT = "The quick brown fox jumps over the lazy dog, and the dog sleeps."


class TextTooLong(ValueError):
    """A text has more tokens than the model's positions; ``index`` (0-based), ``tokens``
    and ``limit`` say which and by how much."""

    def __init__(self, index: int, tokens: int, limit: int):
        super().__init__(f"text {index + 1} has {tokens} tokens, more than the {limit} positions "
                         f"the model takes; shorten it or pass truncate=True to cut it to {limit}")
        self.index, self.tokens, self.limit = index, tokens, limit


@dataclass
class TextMaps:
    """One text's capture: tokens, sentence ids of a pair (or None), maps ``(L, H, n, n)``.

    Cross-attention of an encoder-decoder is a capture too: ``tokens`` are its queries (the
    output), ``keys`` the source tokens, maps ``(L, H, n_out, n_src)``, ``align`` the source
    index each output token is known to read (None where nothing in particular) and
    ``labels`` its own ``[layer][head]`` classes; ``kind`` names it in the report."""

    text: str
    pair: str | None
    tokens: list[str]
    segments: torch.Tensor | None
    maps: torch.Tensor
    keys: list[str] | None = None
    kind: str = "self"
    align: list[int | None] | None = None
    labels: list[list[str]] | None = None
    # The vectors behind the maps, where the model reported them (neuron and value views):
    # q (L, H, n, D) and k (L, H, n_k, D) float32, scale (L,): scores = q k^T * scale;
    # vnorm (L, H, n_k): the norm of each key's value vector.
    q: torch.Tensor | None = None
    k: torch.Tensor | None = None
    scale: torch.Tensor | None = None
    vnorm: torch.Tensor | None = None

    def attach(self, vectors) -> TextMaps:
        """Keep ``vectors = (q, k, v, scale)`` of :meth:`Recording.vectors` (or None)."""
        if vectors is not None:
            q, k, v, scale = vectors
            self.q, self.k, self.scale = q.float(), k.float(), scale.float()
            self.vnorm = v.float().norm(dim=-1)                     # (L, H, n_k)
        return self


@dataclass
class Inspection:
    """Everything an inspection measured: every text's maps, head metrics and labels, head
    distances, attribution (rollout, flow, gradient relevance) and notes for the reader."""
    model: str
    texts: list[tuple[str, str | None]]
    tokens: list[str]                       # of the first text
    maps: torch.Tensor                      # (L, H, n, n) of the first text
    segments: torch.Tensor | None
    metrics: HeadMetrics                    # averaged over all texts
    per_text: list[HeadMetrics]
    dist: torch.Tensor                      # (L*H, L*H) mean JS distance
    xy: torch.Tensor                        # (L*H, 2)
    layer_summary: dict[str, float]
    taxonomy: Taxonomy
    rollout: torch.Tensor                   # (n, n), after the last layer
    flow: torch.Tensor | None               # (n, n) where it fits, else None
    gradient: torch.Tensor | None
    notes: list[str] = field(default_factory=list)
    captures: list[TextMaps] = field(default_factory=list)   # every text, for the report
    rollout_layers: torch.Tensor | None = None               # (L, n, n) after each layer
    gradient_layers: torch.Tensor | None = None              # (L, n, n)
    flow_from: torch.Tensor | None = None                    # (n,) into flow_position
    flow_position: int = 0
    target: str = "norm"
    start_layer: int = 0
    head_table: dict | None = None       # {"caption", "columns", "rows"} for the report
    neuron_layers: list[int] | None = None   # the layers whose q, k the report embeds

    def report_html(self, settings: dict[str, str] | None = None, *,
                    standalone: bool = False) -> str:
        """The interactive report: the fragment a notebook shows inline, or a standalone page.
        Every report has its own root id, so several live in one notebook."""
        from attnlab.inspect.report import render_report

        return render_report(self, settings or self._settings(), standalone=standalone,
                             neuron_layers=self.neuron_layers)

    def _repr_html_(self) -> str:
        return self.report_html()

    def _repr_mimebundle_(self, include=None, exclude=None) -> dict:
        return {"text/html": self.report_html(), "text/plain": repr(self)}

    def __repr__(self) -> str:
        kinds = ", ".join(c.kind for c in self.captures) or "self"
        return (f"<Inspection of {self.model}: {self.layers} layers x {self.heads} heads, "
                f"{len(self.tokens)} tokens, {len(self.texts)} text(s); {kinds}>")

    def save(self, path, settings: dict[str, str] | None = None):
        """Write the standalone report (the file ``attnlab inspect`` writes) to ``path``."""
        from pathlib import Path

        from attnlab.inspect.report import write_report

        return write_report(self, Path(path), settings or self._settings(),
                            neuron_layers=self.neuron_layers)

    def _settings(self) -> dict[str, str]:
        return {"model": self.model, "texts": str(len(self.texts)),
                "first text": self.texts[0][0] if self.texts else "",
                "tokens (first text)": str(len(self.tokens)),
                "layers x heads": f"{self.layers} x {self.heads}",
                "captures": ", ".join(c.kind for c in self.captures)}

    def table(self):
        """One row per head: layer, head, label and every per-head mean the maps gave (the
        census's columns; see :func:`attnlab.inspect.labels.head_table`)."""
        from dataclasses import fields

        from attnlab.inspect.labels import head_table

        m = self.metrics
        return head_table(self.taxonomy.labels, {f.name: getattr(m, f.name) for f in fields(m)})

    @property
    def layers(self) -> int:
        """Number of layers."""
        return self.maps.shape[0]

    @property
    def heads(self) -> int:
        """Number of heads per layer."""
        return self.maps.shape[1]


def trained_length(path) -> int | None:
    """The longest sequence the checkpoint at ``path`` was trained on, where its model card
    (README.md) states it ("The sequence length was limited to 128 tokens" for
    all-MiniLM-L6-v2); None when it does not say."""
    import re
    from pathlib import Path

    try:
        card = (Path(path) / "README.md").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    m = re.search(r"sequence length was limited to (\d+) tokens", card, re.IGNORECASE)
    return int(m.group(1)) if m else None


def past_trained(maps: torch.Tensor, trained: int) -> dict:
    """What happens past the length a model was trained at, measured on the maps of one text
    ``(L, H, n, n)`` with ``n > trained``: the head whose previous-token mass changes most
    there (``head``), its previous-token mass at queries ``1..trained-1`` (``before``) and at
    ``trained..n-1`` (``after``), and the share of queries ``1..trained-1`` of that head whose
    largest weight lies on a key at or past ``trained`` (``pulled``)."""
    maps = maps.double()
    n = maps.shape[-1]
    i = torch.arange(1, n)
    prev = maps[..., i, i - 1]                                       # (L, H, n - 1)
    before, after = prev[..., :trained - 1].mean(-1), prev[..., trained - 1:].mean(-1)
    change = (after - before).abs()
    layer, head = divmod(int(change.flatten().argmax()), maps.shape[1])
    top = maps[layer, head, 1:trained].argmax(-1)                     # rows 1..trained-1
    return {"head": (layer, head), "before": float(before[layer, head]),
            "after": float(after[layer, head]),
            "pulled": float((top >= trained).double().mean())}


def trained_note(maps: torch.Tensor, trained: int, where: str = "") -> str:
    """The note for a text past the trained length, with the numbers of
    :func:`past_trained` on the text at hand and what to do."""
    n = maps.shape[-1]
    m = past_trained(maps, trained)
    layer, head = m["head"]
    return (f"{where}{n} tokens, past the {trained} the model was trained at (its model "
            f"card); its attention changes there, measured on this text: L{layer}H{head} puts "
            f"{m['before']:.2f} of its mass on the previous token at queries 1-{trained - 1} "
            f"and {m['after']:.2f} at queries {trained}-{n - 1}, and {m['pulled']:.0%} of its "
            f"queries 1-{trained - 1} put their largest weight on a key at or past {trained} "
            f"(positions it never learned). Read the heads on at most {trained} tokens: cut "
            f"the text, or give --file one passage of at most {trained} tokens per line")


def reading_notes(tokens: list[str], unk: str | None, trained: int | None,
                  index: int | None = None, maps: torch.Tensor | None = None) -> list[str]:
    """What a reader must know about how the model read a text: words its vocabulary cannot
    read (unknown tokens), and positions past the length it was trained at (with ``maps``,
    what changes there, measured: :func:`trained_note`)."""
    where = "" if index is None else f"text {index + 1}: "
    notes = []
    n = len(tokens)
    unknown = tokens.count(unk) if unk else 0
    if unknown:
        notes.append(f"{where}{unknown} of {n} tokens are {unk}: the model's vocabulary does not "
                     "read this text (for example Chinese in an English model); its attention "
                     "over them says little")
    if trained is not None and n > trained and maps is not None:
        notes.append(trained_note(maps, trained, where))
    elif trained is not None and n > trained:
        notes.append(f"{where}{n} tokens, past the {trained} the model was trained at (its "
                     f"model card): positions {trained}..{n - 1} are ones it never learned")
    return notes


def _encode(tok, text: str, pair: str | None, limit: int, truncate: bool, index: int):
    batch = tok([text], [pair] if pair is not None else None, return_tensors="pt")
    n = batch["input_ids"].shape[1]
    cut = None
    if n > limit:
        if not truncate:
            raise TextTooLong(index, n, limit)
        batch = tok([text], [pair] if pair is not None else None, return_tensors="pt",
                    truncation=True, max_length=limit)
        cut = n
    from attnlab.inspect.tokens import display_tokens

    tokens = display_tokens(tok, tok.convert_ids_to_tokens(batch["input_ids"][0].tolist()))
    seg = batch.get("token_type_ids")
    return batch, tokens, (seg[0] if seg is not None and pair is not None else None), cut


def inspect_texts(texts: list[tuple[str, str | None]], model: str = "default",
                  progress: Callable[[int], None] | None = None, *, truncate: bool = False,
                  target: str = "norm", start_layer: int = 0,
                  position: int = 0, flow_mode: bool | None = None,
                  tokenizer=None) -> Inspection:
    """Inspect ``texts`` (pairs ``(text, pair_or_None)``) with the model at ``model``.

    Args:
        model: ``"default"`` (the embedded all-MiniLM-L6-v2), a local BERT folder, or a loaded
            :class:`~attnlab.nn.BertModel` (then ``tokenizer`` is its tokenizer).
        truncate: cut texts longer than the model's positions (512 for the embedded model)
            and say so in ``notes``; without it such a text raises :class:`TextTooLong`.
        target: what gradient relevance explains: ``"norm"`` of the pooled embedding, or for
            a pair ``"similarity"`` of the two sentences' embeddings.
        start_layer: first layer of rollout and gradient relevance.
        position: the output position whose attention flow is computed at any length
            (default 0, [CLS]); the full flow matrix is computed where it fits.
        flow_mode: None (default): the full flow matrix up to ``flow_matrix_limit()``
            tokens (64 with numba, 32 without) and the flow into ``position`` at any length
            with numba installed; without numba only up to ``FLOW_FROM_AUTO_TOKENS`` (said in
            ``notes``: scipy's max-flow costs about 0.1 s per token at 512 tokens); True: the
            flow into ``position`` at any length; False: no flow.
    """
    from attnlab.nn.bert import BertModel, resolve_model_path
    from attnlab.nn.tokenizer import light_tokenizer

    if not texts:
        raise ValueError("texts is empty: give at least one text")
    if isinstance(model, BertModel):
        if tokenizer is None:
            raise ValueError("a loaded BertModel needs its tokenizer: pass tokenizer= (for the "
                             "embedded model, attnlab.nn.load_default() returns both)")
        bert, tok, path = model, tokenizer, None
    else:
        path = resolve_model_path(model)
        bert = BertModel.from_pretrained(path)
        tok = light_tokenizer(path)
    limit = bert.config.max_position_embeddings
    n_layers = bert.config.num_hidden_layers
    if not 0 <= start_layer < n_layers:
        raise ValueError(f"start_layer must be in 0..{n_layers - 1}, got {start_layer}")
    if target not in TARGETS:
        raise ValueError(f"target must be one of {', '.join(TARGETS)}, got {target!r}")
    per_text, dists, captures, notes = [], [], [], []
    first = None
    for i, (text, pair) in enumerate(texts):
        batch, tokens, seg, cut = _encode(tok, text, pair, limit, truncate, i)
        if i == 0:                             # options about the first text, before any work
            if not 0 <= position < len(tokens):
                raise ValueError(f"position must be in 0..{len(tokens) - 1} (a token of the "
                                 f"first text), got {position}")
            if target == "similarity" and seg is None:
                raise ValueError("target='similarity' needs the first text to be a pair (two "
                                 "sentences); use target='norm' for one text")
        if cut is not None:
            notes.append(f"text {i + 1} was cut from {cut} to {limit} tokens (truncate)")
        with torch.no_grad(), record(bert) as rec:
            bert(batch["input_ids"], batch["attention_mask"], batch.get("token_type_ids"))
        maps = rec.maps(0, attention_mask=batch["attention_mask"])   # (L, H, n, n)
        per_text.append(head_metrics(maps, tokens, seg))
        dists.append(js_distances(maps))
        captures.append(TextMaps(text, pair, tokens, seg, maps.float()).attach(
            rec.vectors(0, attention_mask=batch["attention_mask"])))
        notes += reading_notes(tokens, getattr(tok, "unk_token", None),
                               None if path is None else trained_length(path),
                               i if len(texts) > 1 else None, maps)
        if first is None:
            first = (batch, tokens, seg, maps)
        if progress is not None:
            progress(i + 1)
    batch, tokens, seg, maps = first
    metrics = HeadMetrics.mean(per_text)
    dist = torch.stack(dists).mean(0)
    n = len(tokens)
    f = f_from = None
    if flow_mode is not False:
        limit = flow_matrix_limit()
        f = flow(maps[start_layer:]) if n <= limit and flow_mode is None else None
        if f is not None:
            f_from = f[position]                      # the same row (tested)
        elif flow_mode or n <= FLOW_FROM_AUTO_TOKENS or max_flow_solver(n) == "numba":
            f_from = flow_from(maps[start_layer:], position)
        if f is None and f_from is not None:
            notes.append(f"attention flow: {n} tokens is more than the {limit} of "
                         f"the full matrix; the flow into position {position} "
                         f"({tokens[position]}) is shown")
        elif f is None:
            notes.append(f"attention flow skipped: at {n} tokens the flow into one position "
                         f"takes about {0.1 * n * (n / 512) ** 2:.0f} s with scipy (one max-flow "
                         f"problem per token); ask for it with flow_mode=True (attnlab inspect "
                         f"--flow), or install numba (pip install 'attnlab[fast]'), which "
                         f"solves them in threads in about 3 s at 512 tokens")
    grads = bert_gradient_attention(bert, batch["input_ids"], batch["attention_mask"], target,
                                    batch.get("token_type_ids"), start_layer, per_layer=True)
    roll = rollout(maps, start_layer=start_layer, per_layer=True)
    name = ("all-MiniLM-L6-v2 (embedded)" if str(model) == "default" else
            type(bert).__name__ if path is None else path.name)
    return Inspection(model=name, texts=texts, tokens=tokens, maps=maps, segments=seg,
                      metrics=metrics, per_text=per_text, dist=dist, xy=embed_2d(dist),
                      layer_summary=layer_distance_summary(dist, maps.shape[1]),
                      taxonomy=label_heads(metrics, dist), rollout=roll[-1], flow=f,
                      gradient=grads[-1], notes=notes, captures=captures,
                      rollout_layers=roll, gradient_layers=grads, flow_from=f_from,
                      flow_position=position, target=target, start_layer=start_layer)
