"""``induction``: a 2-layer attention-only causal transformer trained on repeated random tokens.

After Olsson et al. (2022), "In-context learning and induction heads": every training sequence
is ``[BOS] a_1 .. a_L a_1 .. a_L`` with the ``a_i`` drawn uniformly. The first repeat cannot be
predicted (loss about ln V), the second can, by an induction circuit: a previous-token head in
layer 0 writes "the token before me" into each position, and an induction head in layer 1 uses
it to find the earlier occurrence of the current token and copy the token that followed.
Because that is the only way to lower the loss, which heads do what is known by construction.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

from attnlab.nn.multihead import MultiheadAttention
from attnlab.zoo._train import fit_steps

BOS = 0


@dataclass(frozen=True)
class InductionConfig:
    """Sizes of the induction model."""
    vocab: int = 64            # token 0 is BOS
    d_model: int = 64
    heads: int = 4
    layers: int = 2
    max_len: int = 64
    segment: int = 20          # length L of the repeated segment in evaluation
    train_len: int = 48        # training sequences: [BOS], random prefix, L in [6, 23], repeat


class InductionLM(nn.Module):
    """Token + learned position embedding, ``layers`` pre-LN attention-only blocks
    ``x = x + Attn(LN(x))`` (causal), a final LayerNorm and an unembedding."""

    def __init__(self, config: InductionConfig = InductionConfig()):
        super().__init__()
        c = self.config = config
        self.embed = nn.Embedding(c.vocab, c.d_model)
        self.pos = nn.Embedding(c.max_len, c.d_model)
        self.norms = nn.ModuleList(nn.LayerNorm(c.d_model) for _ in range(c.layers))
        self.attn = nn.ModuleList(MultiheadAttention(c.d_model, c.heads, batch_first=True)
                                  for _ in range(c.layers))
        self.norm_out = nn.LayerNorm(c.d_model)
        self.unembed = nn.Linear(c.d_model, c.vocab, bias=False)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """``ids (B, N)`` -> next-token logits ``(B, N, V)``."""
        n = ids.shape[1]
        if n > self.config.max_len:
            raise ValueError(f"ids have {n} positions, more than the model's max_len "
                             f"{self.config.max_len}; pass at most {self.config.max_len}")
        x = self.embed(ids) + self.pos(torch.arange(n, device=ids.device))   # (B, N, E)
        for norm, attn in zip(self.norms, self.attn):
            h = norm(x)
            x = x + attn(h, h, h, need_weights=False, is_causal=True)[0]
        return self.unembed(self.norm_out(x))                                # (B, N, V)

    def ov_circuit(self, layer: int, head: int) -> torch.Tensor:
        """The head's direct OV path from token to logit, ``(V, V)``: ``W_E W_V^h W_O^h W_U``
        in row-vector form (LayerNorms left out), as Olsson et al.'s copying criterion reads
        it (:func:`attnlab.inspect.heads.copying_score`)."""
        e, d = self.config.d_model, self.config.d_model // self.config.heads
        attn = self.attn[layer]
        w_v = attn.in_proj_weight[2 * e:3 * e][head * d:(head + 1) * d]       # (D, E)
        w_o = attn.out_proj.weight[:, head * d:(head + 1) * d]                # (E, D)
        return (self.embed.weight @ w_v.T @ w_o.T @ self.unembed.weight.T).detach()

    def dict_config(self) -> dict:
        """The config as a dict (saved beside the weights)."""
        return asdict(self.config)


def repeated_tokens(batch: int, segment: int, vocab: int = 64, *, prefix: int = 0,
                    generator: torch.Generator | None = None) -> torch.Tensor:
    """``(batch, 1 + prefix + 2 * segment)``: BOS, ``prefix`` random tokens, a random segment,
    the same segment again."""
    pre = torch.randint(1, vocab, (batch, prefix), generator=generator)
    seg = torch.randint(1, vocab, (batch, segment), generator=generator)
    bos = torch.full((batch, 1), BOS, dtype=torch.long)
    return torch.cat([bos, pre, seg, seg], dim=1)


def training_batch(batch: int, length: int, vocab: int = 64, *,
                   generator: torch.Generator | None = None
                   ) -> tuple[torch.Tensor, torch.Tensor]:
    """``ids (batch, length)``: BOS, a random prefix, a segment of random length L, the segment
    again; and ``predictable (batch, length - 1)``, True where the next token is inside the
    second repeat after its first token. L varies per sequence (6 .. (length - 1) // 2), so the
    earlier copy of a token is at no fixed offset: layer 0 cannot reach it by position alone
    and the induction circuit is the only way to predict the second repeat."""
    rows, keep = [], torch.zeros(batch, length - 1, dtype=torch.bool)
    top = (length - 1) // 2
    for r in range(batch):
        seg_len = int(torch.randint(6, top + 1, (1,), generator=generator))
        prefix = length - 1 - 2 * seg_len
        seg = torch.randint(1, vocab, (seg_len,), generator=generator)
        pre = torch.randint(1, vocab, (prefix,), generator=generator)
        rows.append(torch.cat([torch.tensor([BOS]), pre, seg, seg]))
        keep[r, length - seg_len:] = True     # targets a_2 .. a_L of the second repeat
    return torch.stack(rows), keep


def repeat_losses(model: nn.Module, ids: torch.Tensor, segment: int) -> tuple[float, float]:
    """Mean next-token loss on a_2..a_L in the first repeat and in the second, for ``ids``
    from :func:`repeated_tokens` (the last ``2 * segment`` tokens are the two repeats)."""
    logits = model(ids)                                                  # (B, N, V)
    loss = F.cross_entropy(logits[:, :-1].transpose(1, 2), ids[:, 1:], reduction="none")
    n = ids.shape[1]
    first = loss[:, n - 2 * segment:n - segment - 1].mean().item()     # targets a_2..a_L, 1st
    second = loss[:, n - segment:].mean().item()                       # targets a_2..a_L, 2nd
    return first, second


@torch.random.fork_rng(devices=[])   # seeds for the call, the caller's RNG back
def train(config: InductionConfig = InductionConfig(), *, steps: int = 3000, batch: int = 64,
          lr: float = 2e-3, seed: int = 0, log=None) -> InductionLM:
    """Train from a seed on fresh sequences each step (AdamW, one-cycle learning rate)."""
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    model = InductionLM(config)

    def step_loss(_step):
        # The unpredictable tokens weigh 0.1: their gradient is noise that delays the
        # induction circuit's formation (with weight 1 it had not formed after 3000 steps),
        # but some weight keeps their predictions calibrated (loss near ln V, not above).
        ids, keep = training_batch(batch, config.train_len, config.vocab, generator=gen)
        logits = model(ids)[:, :-1]                                      # (B, N - 1, V)
        each = F.cross_entropy(logits.transpose(1, 2), ids[:, 1:], reduction="none")
        weight = keep.float() + 0.1 * (~keep).float()
        return (each * weight).sum() / weight.sum()

    return fit_steps(model, step_loss, steps=steps, lr=lr, log=log)
