"""Train a small causal language model on sequences split across processes (ring attention).

Each rank holds its zig-zag shard of every sequence: embeddings, feed-forward layers and the
loss are token-wise and run on the shard; attention sees the whole sequence through
``attnlab.distributed.SequenceParallel``. The task needs the whole sequence: the second half of
each sequence repeats the first, so a token there is predictable only from a key up to N/2
positions back, usually on another rank.

Launch (one machine, two processes; add --nnodes/--rdzv-endpoint for several machines)::

    torchrun --standalone --nproc-per-node 2 examples/ring_train.py --steps 400

or without torchrun: ``python examples/ring_train.py --nproc 2``. ``--check`` also runs the
model in one process on the whole batch at step 0 and prints both losses.
"""

from __future__ import annotations

import argparse
import datetime
import math
import os
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from attnlab.distributed import SequenceParallel, local_positions, shard, spawn
from attnlab.nn import Encoder, EncoderLayer
from attnlab.nn.position import sinusoidal_table


class TinyLM(nn.Module):
    def __init__(self, vocab: int, d_model: int = 64, heads: int = 4, layers: int = 2,
                 max_len: int = 4096):
        super().__init__()
        self.embed = nn.Embedding(vocab, d_model)
        self.register_buffer("pe", sinusoidal_table(max_len, d_model), persistent=False)
        self.encoder = Encoder(EncoderLayer(d_model, heads, 4 * d_model, dropout=0.0,
                                            batch_first=True, norm_first=True), layers,
                               norm=nn.LayerNorm(d_model))
        self.head = nn.Linear(d_model, vocab)

    def forward(self, tokens: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """``tokens (B, N_local)`` at global ``positions (N_local,)`` -> logits."""
        x = self.embed(tokens) * math.sqrt(self.embed.embedding_dim) + self.pe[positions]
        return self.head(self.encoder(x, is_causal=True))


def batch(step: int, size: int, n: int, vocab: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Random token sequences, and at every position the target: the first token."""
    g = torch.Generator().manual_seed(step)
    x = torch.randint(0, vocab, (size, n), generator=g)
    return x, x[:, :1].expand(size, n)


def train(rank: int, world: int, args: argparse.Namespace) -> list[float]:
    torch.manual_seed(0)                       # the same initial weights on every rank
    model = TinyLM(args.vocab)
    sp = SequenceParallel(model, layout="zigzag", strategy=args.strategy)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    pos = local_positions(args.length, layout="zigzag")
    losses, start = [], time.time()
    for step in range(args.steps):
        x, y = batch(step, args.batch, args.length, args.vocab)
        xs, ys = shard(x, layout="zigzag", dim=1), shard(y, layout="zigzag", dim=1)
        logits = sp(xs, pos)
        # this rank's share of the mean over every token of the batch
        loss = F.cross_entropy(logits.flatten(0, 1), ys.flatten(), reduction="sum") / y.numel()
        opt.zero_grad()
        loss.backward()
        for p in model.parameters():           # the ranks' shares summed: the full gradient
            dist.all_reduce(p.grad)
        opt.step()
        total = loss.detach().clone()
        dist.all_reduce(total)
        losses.append(float(total))
        if args.check and step == 0:
            with torch.no_grad():                # the same weights, the same first batch
                torch.manual_seed(0)
                ref = TinyLM(args.vocab)
                one = F.cross_entropy(ref(x, torch.arange(args.length)).flatten(0, 1), y.flatten())
            if rank == 0:
                print(f"step 0: loss over {world} ranks {float(total):.6f}, "
                      f"in one process {float(one):.6f}", flush=True)
        if rank == 0 and (step % args.every == 0 or step == args.steps - 1):
            print(f"step {step:4d}  loss {float(total):.4f}  ({time.time() - start:.1f} s)",
                  flush=True)
    return losses


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=400)
    p.add_argument("--length", type=int, default=128, help="tokens per sequence (all ranks)")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--vocab", type=int, default=32)
    p.add_argument("--every", type=int, default=20, help="print the loss every k steps")
    p.add_argument("--strategy", default="ring", choices=["ring", "ulysses", "auto"])
    p.add_argument("--check", action="store_true", help="compare step 0 with one process")
    p.add_argument("--nproc", type=int, default=0,
                   help="start this many local processes (instead of torchrun)")
    args = p.parse_args()
    if args.nproc:
        spawn(train, args.nproc, args=(args,), timeout=3600)
        return
    if "RANK" not in os.environ:
        p.error("run under torchrun (it sets RANK, WORLD_SIZE), or give --nproc N")
    dist.init_process_group("gloo")
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // dist.get_world_size()))
    try:
        train(dist.get_rank(), dist.get_world_size(), args)
        # every rank done with its collectives before any closes its connections: a rank
        # that tears down while its peer still reads makes gloo's reader abort the peer.
        # Bounded, and a rank that never arrives is named.
        dist.monitored_barrier(timeout=datetime.timedelta(seconds=60))
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
