"""Fine-tune a Hugging Face Llama-shaped model at long context with the sequence sharded.

Every rank holds the same model (transformers' ``LlamaForCausalLM``, small) and its zig-zag
shard of each sequence; attention runs over the whole sequence through the ring
(``attnlab.distributed.hf.ShardedModel``). The task needs the long context: the second half of
each sequence repeats the first, so a token there is predictable only from one N/2 positions
back, on another rank.

Launch (one machine, four processes; the default length is 32,768 tokens)::

    torchrun --standalone --nproc-per-node 4 examples/hf_long_context.py --steps 4

and the same length in one process, for the memory and the loss to compare with::

    python examples/hf_long_context.py --single --steps 4

Each run prints the loss at every step and, per rank, the activation memory of a training step:
the growth of the process's peak resident memory over the step (``ru_maxrss``), after a first
step at 1/16 of the length has warmed the allocator. ``--check`` (sharded runs) also runs the
first step in one process on rank 0 and prints both losses.
"""

from __future__ import annotations

import argparse
import datetime
import os
import resource
import time

import torch
import torch.distributed as dist


def build(vocab: int, length: int):
    """The same small Llama on every rank (seeded)."""
    import transformers as tf

    torch.manual_seed(0)
    config = tf.LlamaConfig(vocab_size=vocab, hidden_size=64, intermediate_size=128,
                            num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                            max_position_embeddings=length, attention_dropout=0.0)
    return tf.LlamaForCausalLM(config).train()


def batch(step: int, n: int, vocab: int) -> torch.Tensor:
    """One sequence of ``n`` tokens whose second half repeats its first."""
    g = torch.Generator().manual_seed(step)
    half = torch.randint(0, vocab, (1, (n + 1) // 2), generator=g)
    return torch.cat([half, half], dim=1)[:, :n]


def peak_mib() -> float:
    """The process's peak resident memory so far, in MiB (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def run(args, sharded: bool) -> None:
    from attnlab.distributed.hf import ShardedModel

    rank = dist.get_rank() if sharded else 0
    world = dist.get_world_size() if sharded else 1
    model = build(args.vocab, args.length)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr)
    sp = ShardedModel(model, strategy=args.strategy) if sharded else None

    def step(ids: torch.Tensor) -> float:
        if sp is None:
            loss = model(input_ids=ids, labels=ids, use_cache=False).loss
        else:
            local = sp.shard(input_ids=ids, labels=ids)
            loss = sp.loss(sp(**local).logits, local)
        opt.zero_grad()
        loss.backward()
        if sp is not None:
            sp.sync_gradients()
        opt.step()
        return float(loss.detach())

    warm = batch(-1, max(2 * world, args.length // 16), args.vocab)
    step(warm)                                    # the allocator's first growth, not counted
    before = peak_mib()
    start = time.time()
    for s in range(args.steps):
        ids = batch(s, args.length, args.vocab)
        if args.check and sharded and s == 0:
            first = _one_process_loss(args, model, ids) if rank == 0 else None
        loss = step(ids)
        if s == 0:
            grown = peak_mib() - before
        if rank == 0:
            print(f"step {s:3d}  loss {loss:.4f}  ({time.time() - start:.1f} s)", flush=True)
        if args.check and sharded and s == 0 and rank == 0:
            print(f"step 0: loss over {world} ranks {loss:.6f}, in one process {first:.6f}",
                  flush=True)
    where = f"{world} ranks" if sharded else "one process"
    mems = [grown]
    if sharded:
        gathered = [None] * world
        dist.all_gather_object(gathered, grown)
        mems = gathered
    if rank == 0:
        shown = ", ".join(f"{m:.0f}" for m in mems)
        print(f"length {args.length}, {where}: activation memory per rank (MiB) {shown}; "
              f"peak resident {peak_mib():.0f} MiB on rank 0", flush=True)
    if sp is not None:
        sp.close()


def _one_process_loss(args, model, ids: torch.Tensor) -> float:
    """The loss of a copy of ``model`` (the same weights) in one process, on the whole
    sequence, with transformers' own attention and loss."""
    ref = build(args.vocab, args.length)
    ref.load_state_dict(model.state_dict())
    with torch.no_grad():
        return float(ref(input_ids=ids, labels=ids, use_cache=False).loss)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--length", type=int, default=32768, help="tokens per sequence")
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--vocab", type=int, default=256)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--strategy", default="ring", choices=["ring", "ulysses", "auto"])
    p.add_argument("--single", action="store_true", help="one process, no torchrun")
    p.add_argument("--check", action="store_true", help="compare step 0 with one process")
    args = p.parse_args()
    if args.single:
        run(args, sharded=False)
        return
    if "RANK" not in os.environ:
        p.error("run under torchrun (it sets RANK, WORLD_SIZE), or give --single")
    dist.init_process_group("gloo")
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // dist.get_world_size()))
    try:
        run(args, sharded=True)
        # every rank done with its collectives before any closes its connections (bounded; a
        # rank that never arrives is named)
        dist.monitored_barrier(timeout=datetime.timedelta(seconds=120))
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
