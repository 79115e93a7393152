"""Sequence to sequence with additive attention (Bahdanau, Cho & Bengio 2015), on a generated
task whose correct alignment is known.

The task: reverse a string of digits (length 4-12). Output position t must read input position
L - 1 - t, so the cross-attention of a model that has learned the task should lie on the
anti-diagonal: the translation-alignment picture of the paper (its figure 3), reproduced on a
task where the right answer is known.

Model: a bidirectional GRU encoder gives annotations h_1..h_L (forward and backward states
concatenated); a GRU decoder with state s_t scores every annotation with
:class:`attnlab.nn.AdditiveAttention` (``e_tj = vᵀ tanh(W s_{t-1} + U h_j + b)``), takes the
context ``c_t = Σ_j α_tj h_j`` together with the previous output's embedding, and predicts the
next token from ``[s_t; c_t; E y_{t-1}]``. Training uses teacher forcing and the shared training
loop; decoding is greedy until the end token.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from sklearn.exceptions import NotFittedError

from attnlab.models.latex import Equations
from attnlab.models.training import TrainConfig, TrainHistory, resolve_device, seeded, train
from attnlab.nn.additive import AdditiveAttention

PAD, BOS, EOS = 0, 1, 2
DIGITS = "0123456789"
VOCAB = ["<pad>", "<s>", "</s>"] + list(DIGITS)


def encode(text: str) -> list[int]:
    """A digit string as source token ids."""
    bad = [c for c in text if c not in DIGITS]
    if bad:
        raise ValueError(f"the reversal task takes digits only, got {bad[0]!r} in {text!r}")
    return [3 + int(c) for c in text]


def decode(ids) -> str:
    """Target token ids as the digit string they spell (up to the end token)."""
    return "".join(VOCAB[i] for i in ids if i > EOS)


def reversal_data(n: int, min_len: int = 4, max_len: int = 12, seed: int = 0):
    """``n`` random digit strings and their reversals as padded tensors:
    ``src (n, max_len)``, ``tgt (n, max_len + 1)`` ending in the end token."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(min_len, max_len + 1, size=n)
    src = torch.full((n, max_len), PAD, dtype=torch.long)
    tgt = torch.full((n, max_len + 1), PAD, dtype=torch.long)
    for i, L in enumerate(lengths):
        s = torch.as_tensor(rng.integers(3, 13, size=L))
        src[i, :L] = s
        tgt[i, :L] = s.flip(0)
        tgt[i, L] = EOS
    return src, tgt


class _Seq2Seq(nn.Module):
    def __init__(self, vocab: int, emb: int, hidden: int):
        super().__init__()
        self.embed = nn.Embedding(vocab, emb, padding_idx=PAD)
        self.encoder = nn.GRU(emb, hidden, batch_first=True, bidirectional=True)
        self.init = nn.Linear(2 * hidden, hidden)
        self.attn = AdditiveAttention(query_dim=hidden, key_dim=2 * hidden, hidden_dim=hidden)
        self.cell = nn.GRUCell(emb + 2 * hidden, hidden)
        self.out = nn.Linear(hidden + 2 * hidden + emb, vocab)

    def encode(self, src):
        keep = src != PAD                                               # (B, L) True = token
        lengths = keep.sum(1).clamp(min=1).cpu()
        # Packed, so the backward GRU starts at each string's last digit, not in the padding.
        packed = nn.utils.rnn.pack_padded_sequence(self.embed(src), lengths, batch_first=True,
                                                   enforce_sorted=False)
        h, _ = self.encoder(packed)
        h, _ = nn.utils.rnn.pad_packed_sequence(h, batch_first=True, total_length=src.shape[1])
        # h (B, L, 2H), zero at padding
        mean = h.sum(1) / keep.sum(1, keepdim=True).clamp(min=1)
        return h, keep, torch.tanh(self.init(mean))                     # s_0 (B, H)

    def step(self, y_prev, s, h, keep):
        e = self.embed(y_prev)                                          # (B, emb)
        res = self.attn(s.unsqueeze(1), h, h, mask=keep.unsqueeze(1), return_weights=True)
        c, w = res.out[:, 0], res.weights[:, 0]                         # (B, 2H), (B, L)
        s = self.cell(torch.cat([e, c], dim=-1), s)
        return self.out(torch.cat([s, c, e], dim=-1)), s, w

    def forward(self, src, tgt):
        """Teacher-forced logits ``(B, T, vocab)``."""
        h, keep, s = self.encode(src)
        y_prev = torch.full((src.shape[0],), BOS, dtype=torch.long, device=src.device)
        logits = []
        for t in range(tgt.shape[1]):
            lo, s, _ = self.step(y_prev, s, h, keep)
            logits.append(lo)
            y_prev = tgt[:, t]
        return torch.stack(logits, dim=1)

    @torch.no_grad()
    def greedy(self, src, max_len: int):
        h, keep, s = self.encode(src)
        b = src.shape[0]
        y = torch.full((b,), BOS, dtype=torch.long, device=src.device)
        out, maps = [], []
        done = torch.zeros(b, dtype=torch.bool, device=src.device)
        for _ in range(max_len):
            lo, s, w = self.step(y, s, h, keep)
            y = lo.argmax(-1)
            y = torch.where(done, torch.full_like(y, PAD), y)
            out.append(y)
            maps.append(w)
            done |= y == EOS
            if bool(done.all()):
                break
        return torch.stack(out, 1), torch.stack(maps, 1)                # (B, T), (B, T, L)


@dataclass
class Translation:
    """A greedy decode: the output text and the cross-attention ``(len(output) + 1, len(src))``
    (the last row is the step that wrote the end token)."""

    source: str
    output: str
    alignment: np.ndarray


class ReversalSeq2Seq:
    """GRU encoder-decoder with additive attention, trained on digit-string reversal.

    Args:
        emb, hidden: embedding and GRU sizes.
        n_train, n_val: generated training and validation examples.
        min_len, max_len: lengths of the digit strings.
        max_epochs, batch_size, lr, patience, seed, device, verbose: the shared training loop.
    """

    def __init__(self, emb: int = 32, hidden: int = 64, n_train: int = 8000, n_val: int = 1000,
                 min_len: int = 4, max_len: int = 12, max_epochs: int = 6, batch_size: int = 64,
                 lr: float = 3e-3, patience: int = 2, seed: int = 0, device: str = "auto",
                 verbose: bool = False):
        self.emb, self.hidden = emb, hidden
        self.n_train, self.n_val = n_train, n_val
        self.min_len, self.max_len = min_len, max_len
        self.max_epochs, self.batch_size, self.lr = max_epochs, batch_size, lr
        self.patience, self.seed, self.device, self.verbose = patience, seed, device, verbose

    def fit(self) -> "ReversalSeq2Seq":
        """Train on freshly drawn digit strings until the validation loss stops improving."""
        if not 1 <= self.min_len <= self.max_len:
            raise ValueError(f"need 1 <= min_len <= max_len, got {self.min_len}, {self.max_len}")
        self.device_ = resolve_device(self.device)
        src, tgt = reversal_data(self.n_train + self.n_val, self.min_len, self.max_len, self.seed)
        src, tgt = src.to(self.device_), tgt.to(self.device_)
        n = self.n_train

        def loss_fn(model, s, t):
            logits = model(s, t)
            return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), t.reshape(-1),
                                   ignore_index=PAD)

        config = TrainConfig(max_epochs=self.max_epochs, batch_size=self.batch_size, lr=self.lr,
                             weight_decay=0.0, patience=self.patience, clip_norm=1.0,
                             seed=self.seed, verbose=self.verbose)
        with seeded(self.seed, self.device_):
            self.net_ = _Seq2Seq(len(VOCAB), self.emb, self.hidden).to(self.device_)
            self.history_: TrainHistory = train(self.net_, loss_fn, (src[:n], tgt[:n]),
                                                (src[n:], tgt[n:]), config, "seq2seq")
        return self

    def translate(self, texts: list[str]) -> list[Translation]:
        """Greedy decodes of digit strings, with their alignments."""
        if not hasattr(self, "net_"):
            raise NotFittedError("this ReversalSeq2Seq is not fitted yet; call fit() first")
        ids = [encode(t) for t in texts]
        width = max(len(i) for i in ids)
        src = torch.full((len(ids), width), PAD, dtype=torch.long)
        for r, i in enumerate(ids):
            src[r, :len(i)] = torch.tensor(i)
        self.net_.eval()
        out, maps = self.net_.greedy(src.to(self.device_), width + 2)
        res = []
        for r, text in enumerate(texts):
            toks = out[r].tolist()
            end = toks.index(EOS) + 1 if EOS in toks else len(toks)
            res.append(Translation(text, decode(toks[:end]),
                                   maps[r, :end, :len(text)].double().cpu().numpy()))
        return res

    def exact_match(self, n: int = 1000, seed: int = 12345) -> float:
        """Share of ``n`` fresh examples (a generator seed unseen in training) reversed
        exactly."""
        src, tgt = reversal_data(n, self.min_len, self.max_len, seed)
        texts = [decode(s.tolist()) for s in src]
        outs = self.translate(texts)
        return float(np.mean([o.output == t[::-1] for o, t in zip(outs, texts)]))

    def equations(self) -> Equations:
        """The model's equations (Bahdanau attention) and symbol table."""
        H, E = self.hidden, self.emb
        lines = [
            (r"\mathbf{h}_j", r"\left[\overrightarrow{\mathrm{GRU}}(E x_j); "
             r"\overleftarrow{\mathrm{GRU}}(E x_j)\right] \in \mathbb{R}^{" + str(2 * H) + "}"),
            (r"e_{tj}", r"\mathbf{v}^\top \tanh\left(\mathbf{W} \mathbf{s}_{t-1} + \mathbf{U} "
             r"\mathbf{h}_j + \mathbf{b}\right), \quad \mathbf{W} \in \mathbb{R}^{"
             + f"{H} \\times {H}" + r"}, \mathbf{U} \in \mathbb{R}^{"
             + f"{H} \\times {2 * H}" + "}"),
            (r"\alpha_{tj}", r"\frac{\exp(e_{tj})}{\sum_k \exp(e_{tk})}, \quad \mathbf{c}_t = "
             r"\sum_j \alpha_{tj} \mathbf{h}_j"),
            (r"\mathbf{s}_t", r"\mathrm{GRU}\left([E y_{t-1}; \mathbf{c}_t], \mathbf{s}_{t-1}"
             r"\right) \in \mathbb{R}^{" + str(H) + "}"),
            (r"p(y_t \mid y_{<t}, x)", r"\mathrm{softmax}\left(\mathbf{W}_o [\mathbf{s}_t; "
             r"\mathbf{c}_t; E y_{t-1}] + \mathbf{b}_o\right) \in \mathbb{R}^{" + str(len(VOCAB))
             + "}"),
        ]
        return Equations("Reversal seq2seq with additive attention", lines,
                         [(r"E \in \mathbb{R}^{" + f"{E} \\times {len(VOCAB)}" + "}",
                           f"token embeddings: column v is the {E}-dimensional embedding of "
                           f"token v (10 digits, padding, start, end), so E x_j embeds the "
                           "one-hot token x_j"),
                          (r"\mathbf{v}, \mathbf{b}", "the scoring vector and bias of the "
                           "additive attention (Bahdanau et al. 2015)"),
                          (r"\mathbf{W}_o, \mathbf{b}_o", "the output layer over the "
                           f"{len(VOCAB)} tokens")])

    def to_latex(self) -> str:
        """The equations as a LaTeX align fragment."""
        return self.equations().to_latex()
