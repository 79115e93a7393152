"""Every tutorial exercise's check fails on a planted wrong answer (with a message that says
what is off) and passes on the solution."""

from __future__ import annotations

import math

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
    assert not v.passed and "-k^2 / (2 sigma^2)" in v.detail


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
    assert not v.passed and "heads 0-2 the first" in v.detail


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
    assert not v.passed and "parent beam's score" in v.detail
    assert "parents or tokens" in check("10.2", parent_mod).detail


def test_10_3_a_target_token_moves_the_outputs_after_it():
    assert check("10.3", lambda n, t: torch.arange(n) > t).passed
    v = check("10.3", lambda n, t: torch.arange(n) >= t)
    assert not v.passed and "cannot have read it" in v.detail


def test_11_1_rope_score_depends_on_the_offset():
    def right(q, k, delta, theta):
        c, s = math.cos(delta * theta), math.sin(delta * theta)
        return q[0] * (c * k[0] - s * k[1]) + q[1] * (s * k[0] + c * k[1])

    def wrong_sign(q, k, delta, theta):                   # rotated the other way
        return right(q, k, -delta, theta)

    assert check("11.1", right).passed
    v = check("11.1", wrong_sign)
    assert not v.passed and "R(b - a)" in v.detail
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
    assert not v.passed and "class token" in v.detail


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
    assert not v.passed and "fewer keys" in v.detail


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
    assert not v.passed and "early chunk balances a late one" in v.detail


def test_6_1_score_spread():
    assert check("6.1", lambda d: (math.sqrt(d), 1.0)).passed
    v = check("6.1", lambda d: (d, 1.0))                   # the variance, not the std
    assert not v.passed and "square root" in v.detail


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
    assert not v.passed and "tied maxima" in v.detail


def test_1_1_a_uniform_row():
    assert check("1.1", lambda s, n: (1 / n, s + math.log(n))).passed
    v = check("1.1", lambda s, n: (1 / n, s))              # the notebook's first guess
    assert not v.passed and "N terms" in v.detail


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
    assert not v.passed and "wrong way round" in v.detail
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

    def solution(q, k, v, scale=None, chunk=16):             # the chapter's stored solution
        scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
        m = torch.full(q.shape[:-1] + (1,), float("-inf"), dtype=q.dtype)
        l = torch.zeros_like(m)
        o = torch.zeros(q.shape[:-1] + (v.shape[-1],), dtype=q.dtype)
        for start in range(0, k.shape[-2], chunk):
            s = (q @ k[..., start:start + chunk, :].transpose(-2, -1)) * scale
            m_new = torch.maximum(m, s.amax(-1, keepdim=True))
            p = torch.exp(s - m_new)
            r = torch.exp(m - m_new)
            l = l * r + p.sum(-1, keepdim=True)
            o = o * r + p @ v[..., start:start + chunk, :]
            m = m_new
        return o / l

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
