"""Train attnlab's embedded models from their seeds and write them into the package.

    python scripts/train_zoo.py [induction] [dates] [kjv]   # minutes each; kjv about 50

Each model's JSON next to its weights records what this script measured on held-out data;
``tests/zoo`` checks the same claims on the shipped weights.
"""

from __future__ import annotations

import sys
import time

import torch

from attnlab import zoo


def _log(name):
    start = time.perf_counter()

    def log(step, loss):
        print(f"{name}: step {step:5d}  loss {loss:.4f}  {time.perf_counter() - start:6.1f} s",
              flush=True)
    return log


def induction() -> None:
    from attnlab.inspect.ablation import ablate_heads, head_importance
    from attnlab.inspect.capture import record
    from attnlab.inspect.heads import (
        duplicate_token_scores,
        induction_scores,
        previous_token_scores,
    )
    from attnlab.zoo.induction import repeat_losses, repeated_tokens, train

    model = train(log=_log("induction"))
    ids = repeated_tokens(256, 20, prefix=7, generator=torch.Generator().manual_seed(12345))
    with torch.no_grad():
        with record(model) as rec:
            model(ids)
        first, second = repeat_losses(model, ids, 20)
        maps = torch.stack(rec.raw).transpose(0, 1)                  # (B, L, H, N, N)

        def loss():
            return repeat_losses(model, ids, 20)[1]

        zero = head_importance(model, loss)
        with ablate_heads(model, [(1, h) for h in range(model.config.heads)]):
            layer1 = loss()
    facts = {
        "eval": "256 sequences [BOS] + 7 random + 20 random + the same 20, seed 12345",
        "loss_first_repeat": first, "loss_second_repeat": second,
        "prefix_matching": induction_scores(maps, ids).tolist(),
        "previous_token": previous_token_scores(maps).tolist(),
        "duplicate_token": duplicate_token_scores(maps, ids).tolist(),
        "zero_ablation_second_repeat_loss_increase": zero.tolist(),
        "loss_second_repeat_layer1_ablated": layer1,
    }
    zoo.save("induction", model, zoo.weights_dir(), facts)
    print({k: v for k, v in facts.items() if not isinstance(v, list)})


def dates() -> None:
    from attnlab.zoo.dates import alignment_accuracy, exact_match, generate, train

    model = train(log=_log("dates"))
    held = generate(2000, seed=12345, split="heldout")
    facts = {"eval": "2000 held-out dates (a tenth of all dates, by hash, never in training), "
                     "seed 12345",
             "exact_match": exact_match(model, held),
             "alignment_last_layer_mean_heads": alignment_accuracy(model, held)}
    zoo.save("dates", model, zoo.weights_dir(), facts)
    print(facts)


def kjv(stage: str | None = None) -> None:
    from attnlab.zoo import kjv as k

    if stage == "2":                       # continue the shipped stage-1 weights
        model = k.train_stage(zoo.load("kjv"), k.SCHEDULE_2, lr=1e-3, repeat=0.5,
                              segments=True, seed=1, log=_log("kjv stage 2"))
    else:
        model = k.train(log=_log("kjv"))
    facts = {"eval": "held-out books Acts and Revelation (never in training); 4 evenly spaced "
                     "windows per length; repeated: the second half of windows whose second "
                     "half repeats their first",
             "heldout_loss_nats_per_byte": {str(n): round(k.heldout_loss(model, n), 4)
                                            for n in (256, 1024, 4096)},
             "heldout_loss_repeated_second_half_4096": round(
                 k.heldout_loss(model, 4096, repeat=True), 4)}
    zoo.save("kjv", model, zoo.weights_dir(), facts)
    print(facts)


if __name__ == "__main__":
    torch.set_num_threads(2)
    for name in sys.argv[1:] or list(zoo.NAMES):
        if name == "kjv-stage-2":
            kjv("2")
            continue
        {"induction": induction, "dates": dates, "kjv": kjv}[name]()
