"""Every tutorial exercise's check passes three correct answers written different ways and fails
the plausible wrong answers, each with a message that says what is off."""

from __future__ import annotations

import math

import pytest
import torch

from attnlab.testing.exercises import check, loo_mse


def test_7_1_the_dot_product_form_of_the_gaussian_kernel():
    def right(x_q, x_k, sigma):
        s = x_q[:, None] * x_k[None, :] / sigma ** 2 - x_k[None, :] ** 2 / (2 * sigma ** 2)
        return torch.softmax(s, dim=-1)

    def no_key_term(x_q, x_k, sigma):                     # the planted mistake
        return torch.softmax(x_q[:, None] * x_k[None, :] / sigma ** 2, dim=-1)

    assert check("7.1", right).passed
    v = check("7.1", no_key_term)
    assert not v.passed and "differ from the Gaussian kernel's by up to" in v.detail


def test_7_2_the_small_width_limit_is_the_nearest_neighbour():
    def nearest(x_q, x_k, y_k):
        return y_k[(x_q[:, None] - x_k[None, :]).abs().argmin(dim=1)]

    def mean(x_q, x_k, y_k):                              # the wide-kernel limit instead
        return y_k.mean().expand(len(x_q))

    assert check("7.2", nearest).passed
    assert not check("7.2", mean).passed


def test_7_3_a_trained_width_reaches_the_stated_loss():
    g = torch.Generator().manual_seed(0)
    x = torch.sort(torch.rand(50, generator=g, dtype=torch.float64) * 5).values
    y = 2 * torch.sin(x) + x ** 0.8 + 0.5 * torch.randn(50, generator=g, dtype=torch.float64)
    grid = torch.linspace(0.05, 3, 300, dtype=torch.float64)
    best = grid[int(torch.stack([loo_mse(x, y, s) for s in grid]).argmin())]
    target = 1.05 * float(loo_mse(x, y, best))
    assert check("7.3", float(best), x, y, target).passed
    assert not check("7.3", 5.0, x, y, target).passed          # far too wide
    assert not check("7.3", -1.0, x, y, target).passed


def test_8_1_cache_bytes():
    def right(layers, kv_heads, head_dim, tokens, batch, bytes_per):
        return 2 * layers * kv_heads * head_dim * tokens * batch * bytes_per

    def keys_only(layers, kv_heads, head_dim, tokens, batch, bytes_per):
        return layers * kv_heads * head_dim * tokens * batch * bytes_per

    assert check("8.1", right).passed
    v = check("8.1", keys_only)
    assert not v.passed and "two tensors" in v.detail


def test_8_2_one_cached_decoding_step():
    def right(q, kc, vc, k, v):
        kc, vc = torch.cat([kc, k], dim=2), torch.cat([vc, v], dim=2)
        s = q @ kc.transpose(-2, -1) / math.sqrt(q.shape[-1])
        return torch.softmax(s, dim=-1) @ vc, kc, vc

    def forgets_the_cache(q, kc, vc, k, v):
        s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        return torch.softmax(s, dim=-1) @ v, torch.cat([kc, k], dim=2), torch.cat([vc, v], 2)

    assert check("8.2", right).passed
    assert not check("8.2", forgets_the_cache).passed


def test_8_3_grouped_query_heads():
    assert check("8.3", lambda k, n: k.repeat_interleave(n // k.shape[1], dim=1)).passed
    v = check("8.3", lambda k, n: k.repeat(1, n // k.shape[1], 1, 1))   # interleaved wrongly
    assert not v.passed and "read K/V heads [0, 1, 0, 1, 0, 1]" in v.detail


def test_an_unwritten_answer_and_a_crash_are_said_not_raised():
    def todo(**kwargs):
        raise NotImplementedError

    assert "not written yet" in check("8.1", todo).detail
    assert "raised ZeroDivisionError" in check("8.1", lambda **c: 1 / 0).detail


def test_9_1_additive_scores():
    def right(s, h, W, U, v):
        return torch.tanh((s @ W.T)[:, None, :] + h @ U.T) @ v

    def tanh_of_each_apart(s, h, W, U, v):                 # tanh(Ws) + tanh(Uh): not additive
        return (torch.tanh(s @ W.T)[:, None, :] + torch.tanh(h @ U.T)) @ v

    assert check("9.1", right).passed
    assert not check("9.1", tanh_of_each_apart).passed


def test_9_2_the_reversal_alignment():
    assert check("9.2", lambda L: torch.eye(L).flip(1)).passed
    v = check("9.2", lambda L: torch.eye(L))               # the copy task's diagonal
    assert not v.passed and "column" in v.detail


def test_10_1_causal_mask_is_aligned_bottom_right():
    assert check("10.1", lambda q, k: torch.ones(q, k, dtype=torch.bool).triu(k - q + 1)).passed
    v = check("10.1", lambda q, k: torch.ones(q, k, dtype=torch.bool).triu(1))   # top-left
    assert not v.passed and "n_q = 1" in v.detail
    assert not check("10.1", lambda q, k: torch.ones(q, k).triu(k - q + 1)).passed  # not bool


def test_10_2_beam_step_adds_the_parent_score():
    def right(score, logp, k):
        B, _, V = logp.shape
        total, best = (score[:, :, None] + logp).reshape(B, -1).topk(k, dim=1)
        return total, best // V, best % V

    def forgets_history(score, logp, k):                  # the notebook's planted bug
        B, _, V = logp.shape
        best_logp, best = logp.reshape(B, -1).topk(k, dim=1)
        return best_logp, best // V, best % V

    def parent_mod(score, logp, k):                       # parents and tokens swapped
        B, _, V = logp.shape
        total, best = (score[:, :, None] + logp).reshape(B, -1).topk(k, dim=1)
        return total, best % k, best // k

    assert check("10.2", right).passed
    v = check("10.2", forgets_history)
    assert not v.passed and "best totals of the first source" in v.detail
    assert "parents or tokens" in check("10.2", parent_mod).detail


def test_10_3_a_target_token_moves_the_outputs_after_it():
    assert check("10.3", lambda n, t: torch.arange(n) > t).passed
    v = check("10.3", lambda n, t: torch.arange(n) >= t)
    assert not v.passed and "are [1, 2, 3, 4, 5], you said [0, 1, 2, 3, 4, 5]" in v.detail


def test_11_1_rope_score_depends_on_the_offset():
    def right(q, k, delta, theta):
        c, s = math.cos(delta * theta), math.sin(delta * theta)
        return q[0] * (c * k[0] - s * k[1]) + q[1] * (s * k[0] + c * k[1])

    def wrong_sign(q, k, delta, theta):                   # rotated the other way
        return right(q, k, -delta, theta)

    assert check("11.1", right).passed
    v = check("11.1", wrong_sign)
    assert not v.passed and "offset -delta" in v.detail
    assert not check("11.1", lambda q, k, d, t: float(q @ k)).passed      # no rotation at all


def test_11_2_pairs_short_of_a_turn():
    def right(d, n):
        omega = 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
        return [i for i, w in enumerate(omega.tolist()) if (n - 1) * w < 2 * math.pi]

    def one_radian(d, n):                                 # a "turn" of 1 instead of 2 pi
        omega = 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
        return [i for i, w in enumerate(omega.tolist()) if (n - 1) * w < 1]

    assert check("11.2", right).passed
    assert not check("11.2", one_radian).passed


def test_11_3_cached_queries_are_the_last_positions():
    from attnlab.nn import RotaryEmbedding

    rope = RotaryEmbedding(8)
    assert check("11.3", lambda q, k, r: r(q, k), rope).passed
    v = check("11.3", lambda q, k, r: (r(q), r(k)), rope)      # the notebook's planted bug
    assert not v.passed and "positions 7 and 8" in v.detail


def test_12_1_patches_are_squares():
    def right(img, p):
        B, H, W = img.shape
        return img.reshape(B, H // p, p, W // p, p).permute(0, 1, 3, 2, 4).reshape(B, -1, p * p)

    assert check("12.1", right).passed
    v = check("12.1", lambda img, p: img.reshape(len(img), -1, p * p))   # rows of p * p pixels
    assert not v.passed and "p x p square" in v.detail


def test_12_2_vit_attention_weights():
    assert check("12.2", lambda i, p, L, H: L * H * ((i // p) ** 2 + 1) ** 2).passed
    v = check("12.2", lambda i, p, L, H: L * H * ((i // p) ** 2) ** 2)
    assert not v.passed and "leaves out the class token" in v.detail


def test_12_3_graph_softmax_over_neighbours():
    def right(e, adj):
        return torch.softmax(e.masked_fill(~adj, -math.inf), dim=-1)

    assert check("12.3", right).passed
    v = check("12.3", lambda e, adj: torch.softmax(e.masked_fill(~adj, -math.inf), dim=0))
    assert not v.passed and "sum to" in v.detail
    assert "non-neighbour" in check("12.3", lambda e, adj: torch.softmax(e, dim=-1)).detail


def test_13_1_pairs_a_window_keeps():
    def right(n, w):
        w = min(w, n - 1)
        return n * (2 * w + 1) - w * (w + 1)

    assert check("13.1", right).passed
    v = check("13.1", lambda n, w: n * (2 * w + 1))
    assert not v.passed and "first and last w included" in v.detail


def test_13_2_kernel_attention_without_an_n_by_n_tensor():
    def right(pq, pk, v):
        return (pq @ (pk.T @ v)) / (pq @ pk.sum(0))[:, None]

    def quadratic(pq, pk, v):                             # right numbers, N x N memory
        a = pq @ pk.T
        return (a @ v) / a.sum(-1, keepdim=True)

    assert check("13.2", right).passed
    v = check("13.2", quadratic)
    assert not v.passed and "N x N" in v.detail
    assert "differs" in check("13.2", lambda pq, pk, v: pq @ (pk.T @ v)).detail  # unnormalised


def test_13_3_window_mask_keeps_w_each_side():
    def mask(n, w, strict):
        i = torch.arange(n)
        d = (i[:, None] - i[None, :]).abs()
        return d < w if strict else d <= w

    assert check("13.3", lambda n, w: mask(n, w, False)).passed
    v = check("13.3", lambda n, w: mask(n, w, True))
    assert not v.passed and "should keep 5 keys" in v.detail


def test_14_1_merge_is_stable_and_handles_empty_parts():
    def right(o1, l1, o2, l2):
        m = torch.maximum(l1, l2)
        m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
        lse = m + torch.log(torch.exp(l1 - m) + torch.exp(l2 - m))
        w1, w2 = torch.nan_to_num(torch.exp(l1 - lse)), torch.nan_to_num(torch.exp(l2 - lse))
        return w1[..., None] * o1 + w2[..., None] * o2, lse

    def overflowing(o1, l1, o2, l2):                      # the notebook's first try
        w1, w2 = l1.exp(), l2.exp()
        return (w1[..., None] * o1 + w2[..., None] * o2) / (w1 + w2)[..., None], torch.log(w1 + w2)

    def nan_on_empty(o1, l1, o2, l2):                     # stable, but -inf - -inf = nan
        lse = torch.logaddexp(l1, l2)
        return torch.exp(l1 - lse)[..., None] * o1 + torch.exp(l2 - lse)[..., None] * o2, lse

    assert check("14.1", right).passed
    v = check("14.1", overflowing)
    assert not v.passed and "inf or nan" in v.detail
    assert "two empty parts" in check("14.1", nan_on_empty).detail


def test_14_2_contiguous_causal_work():
    def right(n, p):
        b = n // p
        return [b * r * b + b * (b + 1) // 2 for r in range(p)]

    assert check("14.2", right).passed
    assert not check("14.2", lambda n, p: [n * n // (2 * p)] * p).passed    # "balanced"


def test_14_3_zigzag_pairs_early_with_late():
    def right(n, p, r):
        c = n // (2 * p)
        return list(range(r * c, (r + 1) * c)) + list(range((2 * p - 1 - r) * c, (2 * p - r) * c))

    def shifted(n, p, r):                                 # the notebook's planted bug
        c = n // (2 * p)
        return list(range(r * c, (r + 1) * c)) + list(range((p + r) * c, (p + r + 1) * c))

    assert check("14.3", right).passed
    v = check("14.3", shifted)
    assert not v.passed and "rank 0 holds rows [0, 1, 4, 5]" in v.detail


def test_6_1_score_spread():
    assert check("6.1", lambda d: (math.sqrt(d), 1.0)).passed
    v = check("6.1", lambda d: (d, 1.0))                   # the variance, not the std
    assert not v.passed and "(that is the variance)" in v.detail


def test_6_2_dropout_rescales_the_kept_weights():
    def attn(q, k, v, dropout_p=0.0, generator=None, scale=None, rescale=True):
        scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
        a = torch.softmax((q @ k.transpose(-2, -1)) * scale, dim=-1)
        if dropout_p > 0:
            keep = torch.rand(a.shape, generator=generator, dtype=torch.float64) >= dropout_p
            a = a * keep.to(a.dtype) / ((1 - dropout_p) if rescale else 1)
        return a @ v

    assert check("6.2", attn).passed
    v = check("6.2", lambda *a, **o: attn(*a, **o, rescale=False))
    assert not v.passed and "1/(1 - p)" in v.detail


def test_6_3_temperature_limits_split_ties():
    def right(s):
        top = (s == s.max()).to(s.dtype)
        return top / top.sum(), torch.full_like(s, 1 / len(s))

    def argmax_only(s):                                   # the notebook's first guess
        cold = torch.zeros_like(s)
        cold[s.argmax()] = 1.0
        return cold, torch.full_like(s, 1 / len(s))

    assert check("6.3", right).passed
    v = check("6.3", argmax_only)
    assert not v.passed and "2 tied maxima" in v.detail


def test_1_1_a_uniform_row():
    assert check("1.1", lambda s, n: (1 / n, s + math.log(n))).passed
    v = check("1.1", lambda s, n: (1 / n, s))              # the notebook's first guess
    assert not v.passed and "the lse is 1.386294, you said 0.000000" in v.detail


def test_1_2_softmax_jacobian():
    def loops(a):                                          # entry by entry
        n = len(a)
        return [[float(a[i]) * ((i == j) - float(a[j])) for j in range(n)] for i in range(n)]

    assert check("1.2", lambda a: torch.diag(a) - torch.outer(a, a)).passed
    assert check("1.2", lambda a: torch.diag_embed(a) - a[:, None] * a[None, :]).passed
    assert check("1.2", loops).passed
    v = check("1.2", lambda a: torch.diag(a - a ** 2))     # the diagonal only
    assert not v.passed and "off the diagonal" in v.detail and "autograd's" in v.detail
    v = check("1.2", lambda a: torch.diag(a) + torch.outer(a, a))            # a sign
    assert not v.passed and "row" in v.detail


def test_1_3_attention_by_hand_reports_the_output_first():
    def stable(q, k, v, scale=None):
        scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
        s = (q @ k.transpose(-2, -1)) * scale
        e = torch.exp(s - s.amax(-1, keepdim=True))
        return (e / e.sum(-1, keepdim=True)) @ v

    def overflowing(q, k, v, scale=None):                 # the notebook's first version
        scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
        e = torch.exp((q @ k.transpose(-2, -1)) * scale)
        return (e / e.sum(-1, keepdim=True)) @ v

    def ignores_scale(q, k, v, scale=None):               # a gradient-visible bug too
        return torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), -1) @ v

    assert check("1.3", stable).passed
    v = check("1.3", overflowing)          # right on small scores, NaN on large ones
    assert not v.passed and "right on a plain case" in v.detail and "NaN or inf" in v.detail
    v = check("1.3", ignores_scale)        # right forward at the default scale: the kit's turn
    assert not v.passed and "scale=" in v.detail
    assert "the output differs" in check("1.3", lambda q, k, v, scale=None: v[..., :5, :]).detail


def test_2_1_split_heads():
    assert check("2.1", lambda t, h: t.reshape(len(t), h, -1).transpose(0, 1)).passed
    v = check("2.1", lambda t, h: t.reshape(h, len(t), -1))
    assert not v.passed and "head 0 should hold" in v.detail


def test_2_2_mha_parameters_do_not_depend_on_heads():
    assert check("2.2", lambda e, h: 4 * e * e + 4 * e).passed
    assert not check("2.2", lambda e, h: 4 * h * (e // h) ** 2).passed
    assert not check("2.2", lambda e, h: 4 * e * e).passed                  # no biases


def test_2_3_additive_padding_mask():
    def right(lengths, n):
        real = torch.arange(n)[None, :] < torch.as_tensor(lengths)[:, None]
        return torch.zeros(real.shape).masked_fill(~real, float("-inf"))[:, None, None, :]

    assert check("2.3", right).passed
    v = check("2.3", lambda lengths, n: right(lengths, n)[:, 0, 0])
    assert not v.passed and "broadcast" in v.detail
    v = check("2.3", lambda lengths, n: (torch.arange(n)[None, :] < torch.as_tensor(
        lengths)[:, None])[:, None, None, :])
    assert not v.passed and "boolean" in v.detail


def test_3_1_rescale_factor():
    assert check("3.1", lambda m, m_new: math.exp(m - m_new)).passed
    assert check("3.1", lambda m, m_new: torch.exp(torch.tensor(m - m_new,
                                                               dtype=torch.float64))).passed
    assert check("3.1", lambda m, m_new: 2 ** ((m - m_new) / math.log(2))).passed
    v = check("3.1", lambda m, m_new: math.exp(m_new - m))
    assert not v.passed and "yours equals e^(m' - m)" in v.detail
    # right in exact arithmetic, lost in float64: e^800 overflows, e^-800 underflows
    for wrong in (lambda m, m_new: math.exp(m) / math.exp(m_new),
                  lambda m, m_new: torch.exp(torch.tensor(m, dtype=torch.float64))
                  / torch.exp(torch.tensor(m_new, dtype=torch.float64))):
        v = check("3.1", wrong)
        assert not v.passed and "beyond float64" in v.detail and "800" in v.detail


def test_3_2_running_max_never_falls():
    def right(scores, tile):
        per = [float(scores[i:i + tile].max()) for i in range(0, len(scores), tile)]
        return torch.tensor(per).cummax(0).values.tolist()

    def loop64(scores, tile):                 # a loop in float64: once rejected as wrong
        out, m = [], -math.inf
        for i in range(0, len(scores), tile):
            m = max(m, float(scores[i:i + tile].max()))
            out.append(m)
        return out

    def cummax(scores, tile):                 # on the scores themselves, one per tile end
        running = scores.cummax(0).values
        return [float(running[min(i + tile, len(scores)) - 1])
                for i in range(0, len(scores), tile)]

    for answer in (right, loop64, cummax):
        assert check("3.2", answer).passed, answer.__name__
    v = check("3.2", lambda s, t: [float(s[i:i + t].max()) for i in range(0, len(s), t)])
    assert not v.passed and "falls from one tile to the next" in v.detail
    v = check("3.2", lambda s, t: [float(s[i:i + t].max()) for i in range(0, len(s), 2 * t)])
    assert not v.passed and "one running max each" in v.detail


def test_3_3_chunked_attention_reports_the_output():
    def unrescaled(q, k, v, scale=None, chunk=16):           # the notebook's first version
        scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
        out = 0
        for start in range(0, k.shape[-2], chunk):
            s = (q @ k[..., start:start + chunk, :].transpose(-2, -1)) * scale
            out = out + torch.softmax(s, -1) @ v[..., start:start + chunk, :]
        return out

    def exact(q, k, v, scale=None):                          # right, but every score at once
        scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
        return torch.softmax((q @ k.transpose(-2, -1)) * scale, -1) @ v

    solution = _online                                       # the chapter's stored solution

    def in_float64(q, k, v, scale=None):                     # the same walk, kept in float64
        return solution(q.double(), k.double(), v.double(), scale).to(q.dtype)

    def two_passes(q, k, v, scale=None, chunk=8):            # max and sum first, then the sum
        scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
        m = torch.full(q.shape[:-1] + (1,), float("-inf"), dtype=q.dtype)
        for i in range(0, k.shape[-2], chunk):
            s = (q @ k[..., i:i + chunk, :].transpose(-2, -1)) * scale
            m = torch.maximum(m, s.amax(-1, keepdim=True))
        lse = m + torch.log(sum(torch.exp((q @ k[..., i:i + chunk, :].transpose(-2, -1)) * scale
                                          - m).sum(-1, keepdim=True)
                                for i in range(0, k.shape[-2], chunk)))
        return sum(torch.exp((q @ k[..., i:i + chunk, :].transpose(-2, -1)) * scale - lse)
                   @ v[..., i:i + chunk, :] for i in range(0, k.shape[-2], chunk))

    for answer in (solution, in_float64, two_passes):
        v = check("3.3", answer)
        assert v.passed, (answer.__name__, v.detail)
    v = check("3.3", unrescaled)
    assert not v.passed and "the output differs" in v.detail
    v = check("3.3", exact)                                   # the rule the exercise states
    assert not v.passed and "480" in v.detail and "16 keys" in v.detail


def test_4_1_bias_after_the_scale():
    def right(q, k, v, mask=None, scale=None):
        scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
        s = (q @ k.transpose(-2, -1)) * scale
        if mask is not None and mask.dtype != torch.bool:
            s = s + mask
        if mask is not None and mask.dtype == torch.bool:
            s = s.masked_fill(~mask, float("-inf"))
        return torch.nan_to_num(torch.softmax(s, dim=-1)) @ v

    def scaled_bias(q, k, v, mask=None, scale=None):       # the notebook's planted bug
        scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
        if mask is not None and mask.dtype != torch.bool:
            return right(q, k, v, mask=mask * scale, scale=scale)
        return right(q, k, v, mask=mask, scale=scale)

    assert check("4.1", right).passed
    v = check("4.1", scaled_bias)
    assert not v.passed and "float mask" in v.detail


def test_4_2_sinusoidal_dot_product():
    def right(k, d):
        return float(torch.cos(k * 10000.0 ** (-torch.arange(0, d, 2).double() / d)).sum())

    assert check("4.2", right).passed
    assert not check("4.2", lambda k, d: d / 2).passed          # only right at k = 0


def test_4_3_swap_under_a_causal_mask_without_positions():
    assert check("4.3", lambda n, i, j: (torch.arange(n) >= i) & (torch.arange(n) <= j)).passed
    assert not check("4.3", lambda n, i, j: (torch.arange(n) >= i) & (torch.arange(n) < j)).passed

    def both_only(n, i, j):                                   # the answer without the mask
        out = torch.zeros(n, dtype=torch.bool)
        out[i] = out[j] = True
        return out

    assert not check("4.3", both_only).passed


def test_5_1_contributions_weigh_by_the_value():
    def right(alpha, v):
        c = alpha * v.norm(dim=-1)[None, :]
        return c / c.sum(-1, keepdim=True)

    assert check("5.1", right).passed
    assert not check("5.1", lambda a, v: a / a.sum(-1, keepdim=True)).passed


def test_5_2_rollout_multiplies_from_the_left():
    def roll(maps, residual=0.5, left=True):
        n = maps.shape[-1]
        r = torch.eye(n, dtype=maps.dtype)
        for a in maps:
            mixed = (1 - residual) * a + residual * torch.eye(n, dtype=maps.dtype)
            r = mixed @ r if left else r @ mixed
        return r

    assert check("5.2", roll).passed
    v = check("5.2", lambda maps, residual=0.5: roll(maps, residual, left=False))
    assert not v.passed and "reverse order" in v.detail


def test_5_3_uniform_rollout():
    assert check("5.3", lambda n, L, r: (r ** L + (1 - r ** L) / n, (1 - r ** L) / n)).passed
    assert not check("5.3", lambda n, L, r: (r ** L, (1 - r ** L) / n)).passed


def test_9_3_alignment_ignores_padding():
    assert check("9.3", lambda e, keep: torch.softmax(
        e.masked_fill(~keep, float("-inf")), dim=-1)).passed
    v = check("9.3", lambda e, keep: torch.softmax(e, dim=-1))
    assert not v.passed and "padding must get none" in v.detail
    v = check("9.3", lambda e, keep: torch.softmax(e, dim=-1) * keep)        # not renormalised
    assert not v.passed and "not their softmax" in v.detail


# ---------------------------------------------------------------------------------------------
# Three correct answers to every exercise, written different ways: the chapter's solution, one
# in another dtype (float32 where the exercise allows it) or another library, and one written
# another way (a loop against a vectorized form, a closed form against a simulation of it).
# A check that rejects any of them is wrong.

def _mha_params_counted(e, h):
    return sum(p.numel() for p in torch.nn.MultiheadAttention(e, h).parameters())


def _softmax_attention(q, k, v, scale=None):
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    return torch.softmax((q @ k.transpose(-2, -1)) * scale, dim=-1) @ v


def _einsum_attention(q, k, v, scale=None):
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    s = torch.einsum("...id,...jd->...ij", q, k) * scale
    return torch.exp(s - torch.logsumexp(s, -1, keepdim=True)) @ v


def _stable_attention(q, k, v, scale=None):
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    s = (q @ k.transpose(-2, -1)) * scale
    e = torch.exp(s - s.amax(-1, keepdim=True))
    return (e / e.sum(-1, keepdim=True)) @ v


def _online(q, k, v, scale=None, chunk=16):
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    m = torch.full(q.shape[:-1] + (1,), float("-inf"), dtype=q.dtype)
    l = torch.zeros_like(m)
    o = torch.zeros(q.shape[:-1] + (v.shape[-1],), dtype=q.dtype)
    for start in range(0, k.shape[-2], chunk):
        s = (q @ k[..., start:start + chunk, :].transpose(-2, -1)) * scale
        m_new = torch.maximum(m, s.amax(-1, keepdim=True))
        p, r = torch.exp(s - m_new), torch.exp(m - m_new)
        l, o, m = l * r + p.sum(-1, keepdim=True), o * r + p @ v[..., start:start + chunk, :], m_new
    return o / l


def _online_lse(q, k, v, scale=None, chunk=12):
    """Chunks of 12 keys merged by their log-sum-exps (the distributed merge of chapter 14)."""
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    o, lse = None, None
    for start in range(0, k.shape[-2], chunk):
        s = (q @ k[..., start:start + chunk, :].transpose(-2, -1)) * scale
        part_lse = torch.logsumexp(s, -1)
        part = torch.exp(s - part_lse[..., None]) @ v[..., start:start + chunk, :]
        if o is None:
            o, lse = part, part_lse
        else:
            new = torch.logaddexp(lse, part_lse)
            o = torch.exp(lse - new)[..., None] * o + torch.exp(part_lse - new)[..., None] * part
            lse = new
    return o


def _masked(attn):
    def run(q, k, v, mask=None, scale=None):
        scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
        s = (q @ k.transpose(-2, -1)) * scale
        if mask is not None:
            s = s.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else s + mask
        return attn(s, v)
    return run


def _dropout_attn(rescale_first):
    def run(q, k, v, dropout_p=0.0, generator=None, scale=None):
        scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
        a = torch.softmax((q @ k.transpose(-2, -1)) * scale, dim=-1)
        if dropout_p > 0:
            keep = torch.rand(a.shape, generator=generator, dtype=a.dtype) >= dropout_p
            a = torch.where(keep, a / (1 - dropout_p), 0) if rescale_first else \
                a * keep / (1 - dropout_p)
        return a @ v
    return run


def _dropout_functional(q, k, v, dropout_p=0.0, generator=None, scale=None):
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    a = torch.softmax((q @ k.transpose(-2, -1)) * scale, dim=-1)
    if dropout_p > 0:                      # the same Bernoulli draws as the others, scaled
        keep = (torch.rand(a.shape, generator=generator, dtype=a.dtype) >= dropout_p).to(a.dtype)
        a = a * keep * (1.0 / (1.0 - dropout_p))
    return a @ v


def _loo_grid(x, y):
    grid = torch.linspace(0.05, 3, 300, dtype=torch.float64)
    return float(grid[int(torch.stack([loo_mse(x, y, s) for s in grid]).argmin())])


def _loo_descent(x, y):
    from attnlab.testing.exercises import loo_mse as loss
    log_s = torch.tensor(math.log(0.5), dtype=torch.float64, requires_grad=True)
    opt = torch.optim.Adam([log_s], lr=0.05)
    for _ in range(300):
        opt.zero_grad()
        loss(x, y, log_s.exp()).backward()
        opt.step()
    return float(log_s.exp())


def _loo_scipy(x, y):
    from scipy.optimize import minimize_scalar
    res = minimize_scalar(lambda s: float(loo_mse(x, y, torch.tensor(s, dtype=torch.float64))),
                          bounds=(0.05, 3.0), method="bounded")
    return float(res.x)


def _loo_data():
    g = torch.Generator().manual_seed(0)
    x = torch.sort(torch.rand(50, generator=g, dtype=torch.float64) * 5).values
    y = 2 * torch.sin(x) + x ** 0.8 + 0.5 * torch.randn(50, generator=g, dtype=torch.float64)
    return x, y, 1.05 * float(loo_mse(x, y, torch.tensor(_loo_grid(x, y), dtype=torch.float64)))


def _cached(cat_dim):
    def step(q, kc, vc, k, v):
        kc, vc = torch.cat([kc, k], dim=cat_dim), torch.cat([vc, v], dim=cat_dim)
        return torch.nn.functional.scaled_dot_product_attention(q, kc, vc), kc, vc
    return step


def _cached_loop(q, kc, vc, k, v):
    kc, vc = torch.cat([kc, k], 2), torch.cat([vc, v], 2)
    s = torch.einsum("bhqd,bhkd->bhqk", q, kc) / math.sqrt(q.shape[-1])
    return torch.einsum("bhqk,bhkd->bhqd", torch.softmax(s, -1), vc), kc, vc


def _rope_from_module(q, k, rope):
    return rope(q, k)


def _rope_by_hand(q, k, rope):
    from attnlab.testing.exercises.positions import _rope
    n_k = k.shape[-2]
    return _rope(q, torch.arange(n_k - q.shape[-2], n_k)), _rope(k, torch.arange(n_k))


def _rope_offset(q, k, rope):
    n_k, n_q = k.shape[-2], q.shape[-2]
    full = rope(torch.cat([torch.zeros_like(k[..., : n_k - n_q, :]), q], dim=-2))
    return full[..., n_k - n_q:, :], rope(k)


def _patch_unfold(img, p):
    return torch.nn.functional.unfold(img[:, None], p, stride=p).transpose(1, 2)


def _patch_loop(img, p):
    B, H, W = img.shape
    return torch.stack([img[:, r:r + p, c:c + p].reshape(B, p * p)
                        for r in range(0, H, p) for c in range(0, W, p)], dim=1)


def _patch_reshape(img, p):
    B, H, W = img.shape
    return img.reshape(B, H // p, p, W // p, p).permute(0, 1, 3, 2, 4).reshape(B, -1, p * p)


def _merge_logaddexp(o1, l1, o2, l2):
    lse = torch.logaddexp(l1, l2)
    w1 = torch.where(torch.isneginf(l1), 0.0, torch.exp(l1 - lse))
    w2 = torch.where(torch.isneginf(l2), 0.0, torch.exp(l2 - lse))
    return w1[..., None] * o1 + w2[..., None] * o2, lse


def _merge_stack(o1, l1, o2, l2):
    lses = torch.stack([l1, l2])
    lse = torch.logsumexp(lses, 0)
    w = torch.nan_to_num(torch.exp(lses - lse), nan=0.0)
    return (w[..., None] * torch.stack([o1, o2])).sum(0), lse


def _merge_float32_weights(o1, l1, o2, l2):      # weights in float32, outputs kept float64
    m = torch.maximum(l1, l2)
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    lse = m + torch.log(torch.exp(l1 - m) + torch.exp(l2 - m))
    w1 = torch.nan_to_num(torch.exp(l1 - lse))
    w2 = torch.nan_to_num(torch.exp(l2 - lse))
    return (w1[..., None] * o1 + w2[..., None] * o2), lse


def _zigzag_numpy(n, p, r):
    import numpy as np
    chunks = np.array_split(np.arange(n), 2 * p)
    return np.concatenate([chunks[r], chunks[2 * p - 1 - r]])


def _zigzag_torch(n, p, r):
    c = n // (2 * p)
    return torch.cat([torch.arange(r * c, (r + 1) * c),
                      torch.arange((2 * p - 1 - r) * c, (2 * p - r) * c)])


def _zigzag_loop(n, p, r):
    c = n // (2 * p)
    return [i for i in range(n) if i // c in (r, 2 * p - 1 - r)]


def _beam(score, logp, k):
    B, _, V = logp.shape
    total, best = (score[:, :, None] + logp).reshape(B, -1).topk(k, dim=1)
    return total, best // V, best % V


def _beam_sort(score, logp, k):
    B, _, V = logp.shape
    total = (score[:, :, None] + logp).reshape(B, -1)
    order = total.argsort(dim=1, descending=True)[:, :k]
    return total.gather(1, order), torch.div(order, V, rounding_mode="floor"), order % V


def _beam_loop(score, logp, k):
    B, K, V = logp.shape
    out_s, out_p, out_t = [], [], []
    for b in range(B):
        cands = sorted(((float(score[b, i] + logp[b, i, t]), i, t) for i in range(K)
                        for t in range(V)), reverse=True)[:k]
        out_s.append([c[0] for c in cands])
        out_p.append([c[1] for c in cands])
        out_t.append([c[2] for c in cands])
    return (torch.tensor(out_s, dtype=torch.float64), torch.tensor(out_p),
            torch.tensor(out_t))


def _kernel_einsum(pq, pk, v):
    kv = torch.einsum("nm,nd->md", pk, v)
    return torch.einsum("nm,md->nd", pq, kv) / torch.einsum("nm,m->n", pq, pk.sum(0))[:, None]


def _kernel_float32(pq, pk, v):
    pq, pk, v = pq.float(), pk.float(), v.float()
    return (pq @ (pk.T @ v)) / (pq @ pk.sum(0))[:, None]


def _kernel_chunks(pq, pk, v, chunk=50):
    kv = sum(pk[i:i + chunk].T @ v[i:i + chunk] for i in range(0, len(pk), chunk))
    z = sum(pk[i:i + chunk].sum(0) for i in range(0, len(pk), chunk))
    return (pq @ kv) / (pq @ z)[:, None]


def _rollout(maps, residual=0.5):
    n = maps.shape[-1]
    r = torch.eye(n, dtype=maps.dtype)
    for a in maps:
        r = ((1 - residual) * a + residual * torch.eye(n, dtype=maps.dtype)) @ r
    return r


def _rollout_reduce(maps, residual=0.5):
    import functools
    n = maps.shape[-1]
    mixed = [(1 - residual) * a + residual * torch.eye(n, dtype=a.dtype) for a in maps]
    return functools.reduce(lambda acc, a: a @ acc, mixed)


def _rollout_float32(maps, residual=0.5):
    return _rollout(maps.float(), residual)


def _uniform_matrix(n, L, r, dtype=torch.float64):
    a = (1 - r) * torch.full((n, n), 1 / n, dtype=dtype) + r * torch.eye(n, dtype=dtype)
    roll = torch.linalg.matrix_power(a, L)
    return roll[0, 0], roll[0, 1]


def _pairs_loop(n, w):
    return sum(1 for i in range(n) for j in range(n) if abs(i - j) <= w)


def _pairs_closed(n, w):
    w = min(w, n - 1)
    return n * (2 * w + 1) - w * (w + 1)


def _pairs_mask(n, w):
    i = torch.arange(n)
    return int(((i[:, None] - i[None, :]).abs() <= w).sum())


RIGHT = {
    "1.1": [lambda s, n: (1 / n, s + math.log(n)),
            lambda s, n: (torch.softmax(torch.full((n,), s), 0)[0],          # float32
                          torch.logsumexp(torch.full((n,), s), 0)),
            lambda s, n: (float(__import__("numpy").exp(s - __import__("scipy").special
                                .logsumexp([s] * n))), float(__import__("scipy").special
                                                            .logsumexp([s] * n)))],
    "1.2": [lambda a: torch.diag(a) - torch.outer(a, a),
            lambda a: (torch.diag(a) - torch.outer(a, a)).float(),
            lambda a: torch.autograd.functional.jacobian(lambda t: torch.softmax(t, -1),
                                                         a.log())],
    "1.3": [_stable_attention, _softmax_attention, _einsum_attention],
    "2.1": [lambda t, h: t.reshape(len(t), h, -1).transpose(0, 1),
            lambda t, h: torch.stack(t.chunk(h, dim=1)),
            lambda t, h: t.float().reshape(len(t), h, -1).permute(1, 0, 2)],
    "2.2": [lambda e, h: 4 * e * e + 4 * e, _mha_params_counted,
            lambda e, h: 4 * (e * e + e)],
    "2.3": [lambda lengths, n: torch.zeros(len(lengths), n).masked_fill(
                torch.arange(n)[None, :] >= torch.as_tensor(lengths)[:, None],
                float("-inf"))[:, None, None, :],
            lambda lengths, n: torch.where(
                torch.arange(n)[None, :] < torch.tensor(lengths)[:, None], 0.0,
                torch.finfo(torch.float32).min)[:, None, None],
            lambda lengths, n: torch.stack([torch.tensor([0.0] * ln + [-math.inf] * (n - ln),
                                                         dtype=torch.float64)
                                            for ln in lengths]).view(-1, 1, 1, n)],
    "3.1": [lambda m, m_new: math.exp(m - m_new),
            lambda m, m_new: torch.exp(torch.tensor(m - m_new)),                  # float32
            lambda m, m_new: 2 ** ((m - m_new) / math.log(2))],
    "3.2": [lambda s, t: torch.tensor([float(s[i:i + t].max()) for i in range(0, len(s), t)])
            .cummax(0).values.tolist(),
            lambda s, t: [float(s[:i + t].max()) for i in range(0, len(s), t)],
            lambda s, t: __import__("numpy").maximum.accumulate(
                [float(s[i:i + t].max()) for i in range(0, len(s), t)])],
    "3.3": [_online, _online_lse,
            lambda q, k, v, scale=None: _online(q, k, v, scale, chunk=7)],
    "4.1": [_masked(lambda s, v: torch.nan_to_num(torch.softmax(s, -1)) @ v),
            _masked(lambda s, v: (lambda e: torch.nan_to_num(e / e.sum(-1, keepdim=True)))(
                torch.exp(s - s.amax(-1, keepdim=True).nan_to_num(neginf=0.0))) @ v),
            lambda q, k, v, mask=None, scale=None: torch.nn.functional
            .scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)],
    "4.2": [lambda k, d: float(torch.cos(k * 10000.0 ** (-torch.arange(0, d, 2).double() / d))
                               .sum()),
            lambda k, d: torch.cos(k * 10000.0 ** (-torch.arange(0, d, 2) / d)).sum(),  # f32
            lambda k, d: sum(math.sin(7 * w) * math.sin((7 + k) * w)
                             + math.cos(7 * w) * math.cos((7 + k) * w)
                             for w in (10000.0 ** (-i / d) for i in range(0, d, 2)))],
    "4.3": [lambda n, i, j: (torch.arange(n) >= i) & (torch.arange(n) <= j),
            lambda n, i, j: [i <= t <= j for t in range(n)],
            lambda n, i, j: torch.zeros(n, dtype=torch.bool).index_fill_(
                0, torch.arange(i, j + 1), True)],
    "5.1": [lambda a, v: (lambda c: c / c.sum(-1, keepdim=True))(a * v.norm(dim=-1)[None, :]),
            lambda a, v: torch.stack([(a[i, :, None] * v).norm(dim=-1) for i in range(len(a))])
            .div_(torch.stack([(a[i, :, None] * v).norm(dim=-1) for i in range(len(a))])
                  .sum(-1, keepdim=True)),
            lambda a, v: torch.nn.functional.normalize(a.float() * v.float().norm(dim=-1),
                                                       p=1, dim=-1)],
    "5.2": [_rollout, _rollout_reduce, _rollout_float32],
    "5.3": [lambda n, L, r: (r ** L + (1 - r ** L) / n, (1 - r ** L) / n), _uniform_matrix,
            lambda n, L, r: _uniform_matrix(n, L, r, torch.float32)],
    "6.1": [lambda d: (math.sqrt(d), 1.0),
            lambda d: (torch.tensor(float(d)).sqrt(), torch.tensor(1.0)),         # float32
            lambda d: (d ** 0.5, d ** 0.5 / math.sqrt(d))],
    "6.2": [_dropout_attn(True), _dropout_attn(False), _dropout_functional],
    "6.3": [lambda s: ((s == s.max()).double() / (s == s.max()).sum(),
                       torch.full_like(s, 1 / len(s))),
            lambda s: (torch.softmax(s / 1e-6, -1), torch.softmax(s / 1e9, -1)),  # as limits
            lambda s: (torch.softmax(s.float() / 1e-4, -1), torch.ones(len(s)) / len(s))],
    "7.1": [lambda q, k, s: torch.softmax(q[:, None] * k[None, :] / s ** 2
                                          - k[None, :] ** 2 / (2 * s ** 2), -1),
            lambda q, k, s: torch.softmax((q[:, None].float() * k[None, :].float()
                                           - k[None, :].float() ** 2 / 2) / s ** 2, -1),
            lambda q, k, s: torch.nn.functional.softmax(torch.outer(q, k) / s ** 2
                                                        - (k ** 2 / (2 * s ** 2))[None], 1)],
    "7.2": [lambda q, k, y: y[(q[:, None] - k[None, :]).abs().argmin(dim=1)],
            lambda q, k, y: torch.stack([y[int(torch.argmin((k - x).abs()))] for x in q]),
            lambda q, k, y: __import__("attnlab.testing.exercises", fromlist=["x"])
            .nadaraya_watson(q, k, y, 1e-4)],
    "8.1": [lambda layers, kv_heads, head_dim, tokens, batch, bytes_per:
            2 * layers * kv_heads * head_dim * tokens * batch * bytes_per,
            lambda **c: math.prod(c.values()) * 2,
            lambda **c: int(torch.zeros(2, c["layers"], c["batch"], c["kv_heads"], 1,
                                        c["head_dim"]).numel()) * c["tokens"] * c["bytes_per"]],
    "8.2": [_cached(2), _cached(-2), _cached_loop],
    "8.3": [lambda k, n: k.repeat_interleave(n // k.shape[1], dim=1),
            lambda k, n: k[:, :, None].expand(-1, -1, n // k.shape[1], -1, -1)
            .reshape(k.shape[0], n, *k.shape[2:]),
            lambda k, n: k[:, torch.arange(n) // (n // k.shape[1])]],
    "9.1": [lambda s, h, W, U, v: torch.tanh((s @ W.T)[:, None, :] + h @ U.T) @ v,
            lambda s, h, W, U, v: torch.einsum("k,blk->bl", v, torch.tanh(
                torch.einsum("kn,bn->bk", W, s)[:, None] + torch.einsum("km,blm->blk", U, h))),
            lambda s, h, W, U, v: torch.stack([torch.stack([
                v @ torch.tanh(W @ s[b] + U @ h[b, j]) for j in range(h.shape[1])])
                for b in range(h.shape[0])]).double()],
    "9.2": [lambda L: torch.eye(L).flip(1), lambda L: torch.eye(L).fliplr().double(),
            lambda L: [[1.0 if j == L - 1 - t else 0.0 for j in range(L)] for t in range(L)]],
    "9.3": [lambda e, keep: torch.softmax(e.masked_fill(~keep, float("-inf")), dim=-1),
            lambda e, keep: (lambda x: x / x.sum(-1, keepdim=True))(
                torch.exp(e - e.max(-1, keepdim=True).values) * keep),
            lambda e, keep: torch.softmax(torch.where(keep, e, torch.finfo(e.dtype).min), -1)],
    "10.1": [lambda q, k: torch.ones(q, k, dtype=torch.bool).triu(k - q + 1),
             lambda q, k: torch.arange(k)[None, :] > torch.arange(k - q, k)[:, None],
             lambda q, k: ~torch.ones(q, k, dtype=torch.bool).tril(k - q)],
    "10.2": [_beam, _beam_sort, _beam_loop],
    "10.3": [lambda n, t: torch.arange(n) > t, lambda n, t: [i > t for i in range(n)],
             lambda n, t: torch.cat([torch.zeros(t + 1, dtype=torch.bool),
                                     torch.ones(n - t - 1, dtype=torch.bool)])],
    "11.1": [lambda q, k, d, t: q[0] * (math.cos(d * t) * k[0] - math.sin(d * t) * k[1])
             + q[1] * (math.sin(d * t) * k[0] + math.cos(d * t) * k[1]),
             lambda q, k, d, t: (complex(*q.tolist()).conjugate() * complex(*k.tolist())
                                 * complex(math.cos(d * t), math.sin(d * t))).real,
             lambda q, k, d, t: (torch.tensor([[math.cos(3 * t), -math.sin(3 * t)],
                                               [math.sin(3 * t), math.cos(3 * t)]],
                                              dtype=torch.float64) @ q)
             @ (torch.tensor([[math.cos((3 + d) * t), -math.sin((3 + d) * t)],
                              [math.sin((3 + d) * t), math.cos((3 + d) * t)]],
                             dtype=torch.float64) @ k)],
    "11.2": [lambda d, n: [i for i in range(d // 2) if (n - 1) * 10000 ** (-2 * i / d)
                           < 2 * math.pi],
             lambda d, n: torch.nonzero((n - 1) * 10000.0 ** (-torch.arange(0, d, 2).double()
                                                              / d) < 2 * math.pi).flatten(),
             lambda d, n: list(range(math.ceil(d / 2 * math.log((n - 1) / (2 * math.pi))
                                               / math.log(10000)), d // 2))],
    "12.1": [_patch_reshape, _patch_unfold, _patch_loop],
    "12.2": [lambda i, p, L, H: L * H * ((i // p) ** 2 + 1) ** 2,
             lambda i, p, L, H: L * H * (1 + (i // p) * (i // p)) ** 2,
             lambda i, p, L, H: sum(((i // p) ** 2 + 1) ** 2 for _ in range(L * H))],
    "12.3": [lambda e, adj: torch.softmax(e.masked_fill(~adj, -math.inf), dim=-1),
             lambda e, adj: (lambda x: x / x.sum(-1, keepdim=True))(torch.exp(e) * adj),
             lambda e, adj: torch.stack([torch.zeros_like(e[i]).masked_scatter(
                 adj[i], torch.softmax(e[i][adj[i]], 0)) for i in range(len(e))])],
    "13.1": [_pairs_closed, _pairs_loop, _pairs_mask],
    "13.2": [lambda pq, pk, v: (pq @ (pk.T @ v)) / (pq @ pk.sum(0))[:, None],
             _kernel_einsum, _kernel_float32, _kernel_chunks],
    "13.3": [lambda n, w: (torch.arange(n)[:, None] - torch.arange(n)[None, :]).abs() <= w,
             lambda n, w: torch.ones(n, n, dtype=torch.bool).triu(-w).tril(w),
             lambda n, w: [[abs(i - j) <= w for j in range(n)] for i in range(n)]],
    "14.1": [_merge_logaddexp, _merge_stack, _merge_float32_weights],
    "14.2": [lambda n, p: [(n // p) * r * (n // p) + (n // p) * (n // p + 1) // 2
                           for r in range(p)],
             lambda n, p: [sum(range(r * n // p + 1, (r + 1) * n // p + 1)) for r in range(p)],
             lambda n, p: torch.ones(n, n, dtype=torch.bool).tril().reshape(p, -1).sum(1)],
    "14.3": [_zigzag_numpy, _zigzag_torch, _zigzag_loop],
    "16.1": [lambda a, v, w: a[:, 0] * (v @ w).norm(dim=-1)[0] / (a @ (v @ w).norm(dim=-1)),
             lambda a, v, w: (lambda c: c[:, 0] / c.sum(-1))(
                 a.float() * torch.linalg.vector_norm(v.float() @ w.float(), dim=1)),
             lambda a, v, w: torch.tensor(
                 [float(row[0] * (v[0] @ w).norm()) / sum(float(row[j] * (v[j] @ w).norm())
                                                          for j in range(len(v)))
                  for row in a])],
    "16.3": [lambda a, g: (a * g).clamp_min(0).sum(0),
             lambda a, g: torch.where(a * g > 0, a * g, 0.0).float().sum(dim=0),
             lambda a, g: torch.tensor([sum(max(float(a[i, j] * g[i, j]), 0.0)
                                            for i in range(a.shape[0]))
                                        for j in range(a.shape[1])])],
}
EXTRA = {"7.3": None, "11.3": None, "15.1": None, "15.2": None, "15.3": None,  # below
         "16.2": None}


def test_every_exercise_has_three_correct_answers_and_each_passes():
    from attnlab.testing.exercises import _CHECKS

    assert set(RIGHT) | set(EXTRA) == set(_CHECKS)
    for exercise, answers in RIGHT.items():
        assert len(answers) >= 3, exercise
        for i, answer in enumerate(answers):
            v = check(exercise, answer)
            assert v.passed, (exercise, i, v.detail)


# exercises whose output must keep the inputs' dtype (float64 in, float64 out: the conformance
# kit's rule), where a float32 result for float64 inputs is a failure said as such
KEEPS_DTYPE = {"1.3", "3.3", "4.1", "6.2", "8.2"}


def _float32(x):
    if torch.is_tensor(x) and x.is_floating_point():
        return x.float()
    return tuple(_float32(y) for y in x) if isinstance(x, tuple) else x


def test_a_float32_answer_never_crashes_a_check():
    """Every correct answer, its floating results cast to float32, still passes: each check
    casts before it compares (14.1 and 12.3 once raised "Float did not match Double" from
    their own allclose); where the output must keep the inputs' dtype, the verdict says so
    instead of raising."""
    for exercise, answers in RIGHT.items():
        for i, answer in enumerate(answers):
            v = check(exercise, lambda *a, answer=answer, **k: _float32(answer(*a, **k)))
            assert "raised" not in v.detail, (exercise, i, v.detail)
            if exercise in KEEPS_DTYPE:
                assert not v.passed and ("float32" in v.detail or "error" in v.detail
                                         or "differs" in v.detail), (exercise, v.detail)
            else:
                assert v.passed, (exercise, i, v.detail)


def _no_max_entropy(q, k, tile):
    """15.1 in one pass without subtracting the running maximum: right until e^s overflows."""
    scale = 1 / math.sqrt(q.shape[-1])
    lsum, u = torch.zeros(len(q), dtype=q.dtype), torch.zeros(len(q), dtype=q.dtype)
    s0 = None
    for j in range(0, len(k), tile):
        s = q @ k[j:j + tile].T * scale
        s0 = s[:, 0].clone() if s0 is None else s0
        p = torch.exp(s)
        lsum, u = lsum + p.sum(-1), u + (p * s).sum(-1)
    return torch.log(lsum) - u / lsum, torch.exp(s0) / lsum


def _row_at_a_time_stats(q, k, tile):
    """15.1 one query at a time, softmaxing all of its keys at once."""
    out = []
    for i in range(len(q)):
        a = torch.softmax(q[i] @ k.T / math.sqrt(q.shape[-1]), -1)
        out.append((-(a * a.clamp_min(1e-300).log()).sum(), a[0]))
    return torch.stack([h for h, _ in out]), torch.stack([s for _, s in out])


def _row_at_a_time_attention(q, k, v, scale=None):
    """3.3 one query at a time, softmaxing all of its keys at once."""
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    rows = [torch.softmax(q[..., i:i + 1, :] @ k.transpose(-2, -1) * scale, -1) @ v
            for i in range(q.shape[-2])]
    return torch.cat(rows, -2)


def test_the_defects_a_learner_found_now_fail():
    """The wrong answers that passed before: 3.2's two off-by-one running maxima (a tile's
    last key missed, the next tile's first key peeked at), 15.1's entropy without the max
    subtraction (scores near 800 in float64 and 90 in float32 overflow it), and 3.3's and
    15.1's loop over queries that softmaxes all keys of one query at once."""
    cases = {
        ("3.2", "misses each tile's last key"): lambda s, t: [
            float(s[:i + t - 1].max()) for i in range(0, len(s), t)],
        ("3.2", "peeks at the next tile"): lambda s, t: [
            float(s[:i + t + 1].max()) for i in range(0, len(s), t)],
        ("15.1", "no max subtraction"): _no_max_entropy,
        ("15.1", "a whole row per query"): _row_at_a_time_stats,
        ("3.3", "a whole row per query"): _row_at_a_time_attention,
    }
    for (exercise, name), answer in cases.items():
        v = check(exercise, answer)
        assert not v.passed, (exercise, name)
    assert "wide" in check("3.3", _row_at_a_time_attention).detail
    assert "wide" in check("15.1", _row_at_a_time_stats).detail
    assert "scores near" in check("15.1", _no_max_entropy).detail


def test_a_wrong_output_is_named_before_any_gradient():
    """3.3 with scale= ignored: its outputs and gradients are all wrong on the kit's scaled
    cases; the verdict names the output's error, not a larger one of dq or dk."""
    def no_scale(q, k, v, scale=None):
        return _online(q, k, v)

    v = check("3.3", no_scale)
    assert not v.passed and "out error" in v.detail, v.detail
    assert "dq error" not in v.detail and "dk error" not in v.detail


def _inputs_in(dtype):
    def cast(x):
        return x.to(dtype) if torch.is_tensor(x) and x.is_floating_point() else x
    return cast


def test_every_correct_answer_returning_numpy_passes():
    """Every correct answer whose tensors come back as numpy arrays passes its check (each
    check reads results with torch.as_tensor), except the attention functions the
    conformance kit differentiates, which must return tensors and are told so."""
    def to_numpy(x):
        if torch.is_tensor(x):
            return x.detach().numpy()
        return tuple(to_numpy(y) for y in x) if isinstance(x, tuple) else x

    for exercise, answers in RIGHT.items():
        for i, answer in enumerate(answers):
            v = check(exercise, lambda *a, answer=answer, **k: to_numpy(answer(*a, **k)))
            if exercise in KEEPS_DTYPE - {"8.2"}:
                assert not v.passed, (exercise, v)
                assert exercise == "6.2" or "must be a torch tensor" in v.detail, v.detail
            else:
                assert v.passed, (exercise, i, v.detail)


def test_every_correct_answer_computed_in_float32_passes():
    """Every correct answer run on float32 inputs (the check's float64 probes rounded to
    float32, the answer computing in float32) passes: the checks compare within the answer's
    own rounding. Where the output must keep the inputs' dtype, the kit's own float32 cases
    already run the answer in float32, and the float64 probe then names the dtype."""
    cast = _inputs_in(torch.float32)
    for exercise, answers in RIGHT.items():
        if exercise in KEEPS_DTYPE:
            continue
        for i, answer in enumerate(answers):
            own = []

            def in_float32(*a, answer=answer, own=own, **k):
                try:
                    out = answer(*(cast(x) for x in a), **{n: cast(x) for n, x in k.items()})
                except RuntimeError as err:       # an answer written for float64 only
                    own.append(err)
                    raise
                # a Python float carries no dtype: one computed from float32 inputs says so
                return torch.tensor(out, dtype=torch.float32) if isinstance(out, float) else out
            v = check(exercise, in_float32)
            assert v.passed or own, (exercise, i, v.detail)


def test_16_1_the_value_weighted_share_fails_what_leaves_out_a_factor():
    """The sink share of the output: the weight alone, the value's norm without W_O, squared
    norms, no normalisation and the wrong axis of the norm all fail, each with the row."""
    wrong = {
        "weight alone": lambda a, v, w: a[:, 0],
        "no W_O": lambda a, v, w: a[:, 0] * v.norm(dim=-1)[0] / (a @ v.norm(dim=-1)),
        "squared": lambda a, v, w: (lambda n: a[:, 0] * n[0] / (a @ n))(
            ((v @ w) ** 2).sum(-1)),
        "unnormalised": lambda a, v, w: a[:, 0] * (v @ w).norm(dim=-1)[0],
        "over the sum of norms": lambda a, v, w: (lambda n: a[:, 0] * n[0] / n.sum())(
            (v @ w).norm(dim=-1)),
        "norm of the weighted sum": lambda a, v, w: a[:, 0] * (v @ w).norm(dim=-1)[0]
        / (a @ v @ w).norm(dim=-1),
    }
    for name, answer in wrong.items():
        v = check("16.1", answer)
        assert not v.passed, name
        assert "share from key 0" in v.detail, (name, v.detail)


def test_16_3_relevance_fails_a_clip_in_the_wrong_place():
    wrong = {
        "clip after the sum": lambda a, g: (a * g).sum(0).clamp_min(0),
        "absolute values": lambda a, g: (a * g).abs().sum(0),
        "gradient alone": lambda a, g: g.clamp_min(0).sum(0),
        "over the keys": lambda a, g: (a * g).clamp_min(0).sum(1)[:1].expand(a.shape[1]),
        "weights alone": lambda a, g: a.sum(0),
        "mean over queries": lambda a, g: (a * g).clamp_min(0).mean(0),
    }
    for name, answer in wrong.items():
        v = check("16.3", answer)
        assert not v.passed, name
        assert "relevance is" in v.detail, (name, v.detail)


def test_7_3_and_11_3_three_correct_answers():
    from attnlab.nn import RotaryEmbedding

    x, y, target = _loo_data()
    for find in (_loo_grid, _loo_descent, _loo_scipy):
        v = check("7.3", find(x, y), x, y, target)
        assert v.passed, (find.__name__, v.detail)
    rope = RotaryEmbedding(8)
    for answer in (_rope_from_module, _rope_by_hand, _rope_offset):
        v = check("11.3", answer, rope)
        assert v.passed, (answer.__name__, v.detail)


def test_hints_go_from_a_nudge_to_the_explanation():
    from attnlab.testing.exercises import _CHECKS, HINTS, hint

    assert set(HINTS) == set(_CHECKS)
    assert all(len(h) >= 3 for h in HINTS.values())
    first, last = hint("3.1"), hint("3.1", 9)
    assert hasattr(first, "_ipython_display_")          # a notebook shows it once
    assert "hint 1" in first and 'hint("3.1", 2)' in first
    assert "the last of 3 hints" in last and "e^{m - m'}" in last
    with pytest.raises(ValueError, match="exercise must be one of"):
        hint("99.1")
    with pytest.raises(ValueError, match="n must be an int >= 1, got 0"):
        hint("3.1", 0)
    assert 'hint("1.1")' in str(check("1.1", lambda s, n: (0.5, s)))


def test_failure_messages_name_what_differs_not_the_fix():
    """The fix lives in the hints: no failure message tells the reader what to write."""
    cases = [("3.3", lambda q, k, v, scale=None: _online(q, k, v, scale).float()),
             ("13.2", lambda pq, pk, v: (pq @ pk.T @ v) / (pq @ pk.T).sum(-1, keepdim=True)),
             ("14.1", lambda o1, l1, o2, l2: ((l1.exp()[..., None] * o1 + l2.exp()[..., None]
                                               * o2) / (l1.exp() + l2.exp())[..., None],
                                              torch.log(l1.exp() + l2.exp()))),
             ("14.3", lambda n, p, r: list(range(r * n // (2 * p), (r + 1) * n // (2 * p)))
              + list(range((p + r) * n // (2 * p), (p + r + 1) * n // (2 * p))))]
    fixes = ("exponentiate", "regroup", "should hold chunks", "use ", "take its", "must ")
    for exercise, wrong in cases:
        v = check(exercise, wrong)
        assert not v.passed
        assert not any(f in v.detail for f in fixes), (exercise, v.detail)
    v = check("3.3", cases[0][1])
    assert "float32" in v.detail                      # the dtype is named


# The plausible wrong answers of the exercises whose tests above only assert a failure, each
# with the words of its message.
WRONG = [
    ("2.2", lambda e, h: 4 * e * e, "E = 12, H = 3: torch.nn.MultiheadAttention has 624"),
    ("4.2", lambda k, d: d / 2, "for d = 16, k = 1"),
    ("4.3", lambda n, i, j: (torch.arange(n) >= i) & (torch.arange(n) < j),
     "swapping 1 and 3: the outputs that change are [1, 2, 3]"),
    ("5.1", lambda a, v: a / a.sum(-1, keepdim=True), "row 0 should be"),
    ("5.3", lambda n, L, r: (r ** L, (1 - r ** L) / n), "n = 5, L = 1, r = 0.5: the rollout"),
    ("7.2", lambda q, k, y: y.mean().expand(len(q)), "at sigma = 0.001 the estimate is"),
    ("8.2", lambda q, kc, vc, k, v: (_cached(2)(q, kc, vc, k, v)[0], kc, vc),
     "after step 0 the cache should hold 1 positions"),               # the cache not kept
    ("9.1", lambda s, h, W, U, v: (torch.tanh(s @ W.T)[:, None, :] + torch.tanh(h @ U.T)) @ v,
     "largest at sequence"),
    ("11.2", lambda d, n: list(range(d // 2)), "for d = 16, n_train = 32"),
    ("14.2", lambda n, p: [n * n // (2 * p)] * p, "for N = 8, P = 2 the ranks compute [10, 26]"),
    ("1.1", lambda s, n: (math.exp(s) / n, s + math.log(n)),      # e^s / N, not e^s / (N e^s)
     "N = 10 equal scores: each weight is 0.1, you said 1.21825"),
]


def test_listed_wrong_answers_fail_with_their_message():
    for exercise, wrong, words in WRONG:
        v = check(exercise, wrong)
        assert not v.passed and words in v.detail, (exercise, v.detail)


# ---------------------------------------------------------------------------------------------
# Chapter 15: statistics in one pass, and the heads of SmolLM2 (the shipped real model).

def _stats_online(q, k, tile, dtype=None):
    if dtype is not None:
        q, k = q.to(dtype), k.to(dtype)
    scale = 1 / math.sqrt(q.shape[-1])
    m = torch.full((len(q),), -math.inf, dtype=q.dtype)
    l, u = torch.zeros(len(q), dtype=q.dtype), torch.zeros(len(q), dtype=q.dtype)
    s0 = None
    for j in range(0, len(k), tile):
        s = q @ k[j:j + tile].T * scale
        if s0 is None:
            s0 = s[:, 0].clone()
        m_new = torch.maximum(m, s.amax(-1))
        r = torch.exp(m - m_new)
        p = torch.exp(s - m_new[:, None])
        l, u, m = l * r + p.sum(-1), u * r + (p * s).sum(-1), m_new
    lse = m + torch.log(l)
    return lse - u / l, torch.exp(s0 - lse)


def _stats_attnlab(q, k, tile):
    from attnlab.core.engine.tiles import tile_sizes
    from attnlab.core.stats import attention_stats

    with tile_sizes(tile, tile):
        st = attention_stats(q[None, None], k[None, None])
    return st.entropy[0, 0], st.sink_mass[0, 0]


def _stats_two_walks(q, k, tile):
    """First walk: lse by merging tiles' logsumexps; second: H = lse - sum a s."""
    scale = 1 / math.sqrt(q.shape[-1])
    lse = torch.full((len(q),), -math.inf, dtype=q.dtype)
    for j in range(0, len(k), tile):
        lse = torch.logaddexp(lse, torch.logsumexp(q @ k[j:j + tile].T * scale, -1))
    mean_s = sum(((torch.exp(s - lse[:, None]) * s).sum(-1)
                  for s in (q @ k[j:j + tile].T * scale for j in range(0, len(k), tile))))
    return lse - mean_s, torch.exp(q @ k[0] * scale - lse)


def _dense_stats(q, k, tile):                              # right values, all scores at once
    a = torch.softmax(q @ k.T / math.sqrt(q.shape[-1]), -1)
    return -(a * a.log()).sum(-1), a[:, 0]


def test_15_1_head_statistics_in_one_pass():
    for answer in (_stats_online, _stats_attnlab, _stats_two_walks,
                   lambda q, k, t: _stats_online(q, k, t, torch.float32)):
        v = check("15.1", answer)
        assert v.passed, v.detail
    v = check("15.1", _dense_stats)
    assert not v.passed and "all the scores" in v.detail
    v = check("15.1", lambda q, k, t: (_stats_online(q, k, t)[0],
                                       torch.softmax(q @ k[:t].T / math.sqrt(q.shape[-1]),
                                                     -1)[:, 0]))    # the first tile's softmax
    assert not v.passed and "sink mass is" in v.detail
    v = check("15.1", lambda q, k, t: (torch.log(torch.tensor(float(len(k)))).expand(len(q)),
                                       _stats_online(q, k, t)[1]))     # the uniform entropy
    assert not v.passed and "entropy is" in v.detail


