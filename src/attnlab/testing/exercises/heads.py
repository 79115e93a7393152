"""Chapter 15's checks: a head's statistics in one pass over tiles of keys, the induction heads
of a real pretrained model (SmolLM2-135M), and their proof by ablation."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from attnlab.testing.exercises._verdict import Verdict, dtype_name, errors, tolerance

# 15.2: a head is an induction head when its prefix-matching score (the mean weight a query puts
# on the keys that follow an earlier occurrence of its own token) on a repeated random sequence
# is at least SURE; heads between MAYBE and SURE may be named or not (the score moves a little
# with the sequence drawn); a head below MAYBE is not one. Olsson et al. (2022) call a head an
# induction head from its prefix matching on repeated random tokens; attnlab's census labels
# at 0.3 (attnlab.inspect.labels).
SURE, MAYBE = 0.5, 0.2


def _one_pass(fn: Callable) -> Verdict:
    """``fn(q (N_q, D), k (N_k, D), tile) -> (entropy (N_q,), sink mass (N_q,))`` of
    ``softmax(q k^T / sqrt(D))``, walking the keys ``tile`` at a time, never holding more than
    one tile's scores (every tensor the code creates is watched)."""
    from attnlab.testing.exercises.efficient import _Largest

    g = torch.Generator().manual_seed(24)
    # the last two: scores near 800 in float64 and near 90 in float32, where e^s overflows
    for n_q, n_k, d, tile, spread, dtype in ((12, 96, 8, 16, 1.0, torch.float64),
                                             (5, 50, 4, 12, 6.0, torch.float64),
                                             (5, 40, 4, 8, 800.0, torch.float64),
                                             (5, 40, 4, 8, 90.0, torch.float32)):
        q = torch.randn(n_q, d, generator=g, dtype=torch.float64)
        k = torch.randn(n_k, d, generator=g, dtype=torch.float64)
        if spread > 10:         # every row's largest score near ``spread``
            q = q / q.norm(dim=-1, keepdim=True) * math.sqrt(d)
            k = k / k.norm(dim=-1, keepdim=True)
            k[0] = q[0] / math.sqrt(d)
            k = k * spread
        else:
            q = q * spread
        a = torch.softmax(q @ k.T / math.sqrt(d), dim=-1)
        want_h = -(a * a.clamp_min(1e-300).log()).sum(-1)
        want_sink = a[:, 0]
        with _Largest() as watch:
            answer = fn(q.to(dtype), k.to(dtype), tile)
        entropy, sink = (torch.as_tensor(x) for x in answer)
        if tuple(entropy.shape) != (n_q,) or tuple(sink.shape) != (n_q,):
            return Verdict("15.1", False, f"for {n_q} queries expected two ({n_q},) tensors, got "
                           f"{tuple(entropy.shape)} and {tuple(sink.shape)}")
        # H = lse - sum a s subtracts numbers of the scores' size: its rounding is theirs
        logit = float((q @ k.T).abs().max()) / math.sqrt(d)
        for name, got, want, size in (("entropy", entropy, want_h, logit),
                                      ("sink mass", sink, want_sink, logit)):
            diff = errors(got, want)
            if float(diff.max()) > tolerance(got, size):
                i = int(diff.argmax())
                kind = (f", scores near {spread:g} in {dtype_name(q.to(dtype))}" if spread > 10
                        else ", sharp rows" if spread > 1 else "")
                return Verdict("15.1", False, f"{n_q} queries, {n_k} keys in tiles of {tile}"
                               f"{kind}: query {i}'s {name} "
                               f"is {float(want[i]):.6f} from the dense weights, you said "
                               f"{float(got[i]):.6f} ({dtype_name(got)})")
        if watch.largest >= n_q * n_k:
            return Verdict("15.1", False, f"right values, but your code created a tensor of "
                           f"{watch.largest:,} elements for {n_q} queries and {n_k} keys (all "
                           f"the scores: {n_q * n_k:,}); the exercise holds one tile at a time")
        if watch.widest > tile:
            return Verdict("15.1", False, f"right values, but your code computed a tensor "
                           f"{watch.widest} wide for {n_k} keys in tiles of {tile}: "
                           f"{watch.widest} keys' scores for one query at once; the exercise "
                           "holds one tile at a time")
    return Verdict("15.1", True, "two heads, a sharp one included, one tile at a time")


def prefix_matching(model, ids: torch.Tensor) -> torch.Tensor:
    """Each head's prefix-matching score on ``ids (1, N)``, ``(layers, heads)``."""
    from attnlab.inspect.capture import record
    from attnlab.inspect.heads import induction_scores

    with record(model) as rec, torch.no_grad():
        model(input_ids=ids, use_cache=False)
    return induction_scores(rec.maps(0), ids[0])


def _induction_heads(fn: Callable, model, ids: torch.Tensor) -> Verdict:
    """``fn(model, ids) -> [(layer, head), ...]``: the induction heads, found on ``ids``, a
    repeated random sequence (BOS, A, A)."""
    scores = prefix_matching(model, ids)
    got = sorted({(int(la), int(h)) for la, h in fn(model, ids)})
    sure = [(la, h) for la, h in zip(*torch.nonzero(scores >= SURE, as_tuple=True))]
    sure = sorted((int(la), int(h)) for la, h in sure)
    missed = [x for x in sure if x not in got]
    if missed:
        la, h = missed[0]
        return Verdict("15.2", False, f"head {la}.{h} (layer.head, 0-based) puts "
                       f"{float(scores[la, h]):.2f} of its weight on the token after an earlier "
                       f"copy of the query's, and is not in your {len(got)} heads")
    wrong = [x for x in got if not (0 <= x[0] < scores.shape[0] and 0 <= x[1] < scores.shape[1])
             or float(scores[x]) < MAYBE]
    if wrong:
        la, h = wrong[0]
        where = (f"puts only {float(scores[la, h]):.2f} of its weight there"
                 if 0 <= la < scores.shape[0] and 0 <= h < scores.shape[1]
                 else f"does not exist ({scores.shape[0]} layers of {scores.shape[1]} heads)")
        return Verdict("15.2", False, f"you named head {la}.{h}, which {where}")
    return Verdict("15.2", True, f"{len(got)} heads, every one with prefix matching >= "
                   f"{MAYBE} and none >= {SURE} left out")


def second_copy_nats(model, ids: torch.Tensor) -> float:
    """Mean loss (nats) of predicting the second copy of A in ``ids = (BOS, A, A)``."""
    n_half = (ids.shape[1] - 1) // 2
    with torch.no_grad():
        logits = model(input_ids=ids, use_cache=False).logits[0, :-1].double()
    each = torch.nn.functional.cross_entropy(logits, ids[0, 1:], reduction="none")
    return float(each[n_half + 1:].mean())


def _ablation(fn: Callable, model, ids: torch.Tensor, heads) -> Verdict:
    """``fn(model, ids, heads) -> (nats before, nats after)``: the second copy's mean loss
    with every head intact and with the ``heads`` outputs zeroed."""
    from attnlab.inspect.ablation import ablate_heads

    before = second_copy_nats(model, ids)
    with ablate_heads(model, heads):
        after = second_copy_nats(model, ids)
    again = second_copy_nats(model, ids)
    answer = fn(model, ids, heads)
    got = [float(x) for x in answer]
    if len(got) != 2:
        return Verdict("15.3", False, f"expected (nats before, nats after), got {len(got)} "
                       "numbers")
    if abs(second_copy_nats(model, ids) - again) > 1e-9:
        return Verdict("15.3", False, "after your function the model's loss has changed: the "
                       "ablation was left in place")
    allowed = max(tolerance(answer, 10.0, ulps=1e4), 2e-3)    # float32 logits, other orders
    for name, g, w in (("before", got[0], before), ("after", got[1], after)):
        if abs(g - w) > allowed:
            n_half = (ids.shape[1] - 1) // 2
            return Verdict("15.3", False, f"the second copy's loss {name} ablating {heads} "
                           f"(the mean over the {ids.shape[1] - n_half - 2} predictions of the "
                           f"second copy's tokens after its first) is {w:.4f} nats, you said "
                           f"{g:.4f}")
    return Verdict("15.3", True, f"{before:.2f} -> {after:.2f} nats with {len(heads)} heads "
                   "zeroed")


CHECKS = {"15.1": _one_pass, "15.2": _induction_heads, "15.3": _ablation}
