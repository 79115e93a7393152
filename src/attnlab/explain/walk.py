"""One attention call step by step on real numbers, checked against the code.

:func:`walk` computes X -> Q, K, V = X W -> Q K^T -> scaled -> masked -> softmax (row max,
exponentials, row sum, weights, lse) -> A V in float64, checks the invariants, and runs every
exact backend on the same numbers. :func:`embedded_example` gives X from the embedded
all-MiniLM-L6-v2's token embeddings. Numbers and checks only: ``attnlab explain``
(:mod:`attnlab.cli.explain`) prints them and :func:`attnlab.plots.explain.save_heatmaps`
draws them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from attnlab.core import attention, list_backends, masks

BUILTIN_TEXT = "the cat sat on the mat"
BUILTIN_TOKENS = ["the", "cat", "sat", "on", "the", "mat"]
MAX_TOKENS = 64          # every matrix is printed in full
D_MODEL = 8              # width of the built-in X: 8 principal components of the embeddings


@dataclass
class Check:
    """One check of a walk: its name, whether it passed, and the measured detail."""
    name: str
    passed: bool
    detail: str


@dataclass
class Inputs:
    """Token vectors X and the projections that make Q, K, V (every number rounded to 0.1,
    so that each product can be followed by hand)."""

    tokens: list[str]
    x: torch.Tensor            # (N, D_model)
    w_q: torch.Tensor          # (D_model, D_k)
    w_k: torch.Tensor
    w_v: torch.Tensor
    source: str

    @property
    def q(self) -> torch.Tensor:
        """Q = X W_Q, (N, D_k)."""
        return self.x @ self.w_q

    @property
    def k(self) -> torch.Tensor:
        """K = X W_K, (N, D_k)."""
        return self.x @ self.w_k

    @property
    def v(self) -> torch.Tensor:
        """V = X W_V, (N, D_k)."""
        return self.x @ self.w_v


@dataclass
class Walkthrough:
    """All intermediate matrices of one attention call, float64, shapes (N_q, ...)."""

    tokens: list[str]
    q: torch.Tensor            # (N, D)
    k: torch.Tensor            # (N, D)
    v: torch.Tensor            # (N, D)
    scale: float
    temperature: float
    causal: bool
    window: tuple[int | None, int | None] | None
    keep: torch.Tensor         # (N, N) bool, True = may attend
    s: torch.Tensor            # (N, N) Q K^T
    scaled: torch.Tensor       # (N, N) S * scale / temperature, -inf where masked
    a: torch.Tensor            # (N, N) softmax rows
    o: torch.Tensor            # (N, D) A V
    checks: list[Check] = field(default_factory=list)
    backends: dict[str, str] = field(default_factory=dict)   # backends not compared, and why
    source: str = "built-in example"                          # where Q, K, V come from
    label: str = ""                                           # short form for figure titles
    inputs: Inputs | None = None                              # X and W_Q, W_K, W_V, if known
    unmasked: torch.Tensor | None = None   # (N, N) S * scale / T before the mask
    row_max: torch.Tensor | None = None    # (N,) m_i, the largest visible score of row i
    exps: torch.Tensor | None = None       # (N, N) exp(s_ij - m_i), 0 where masked
    row_sum: torch.Tensor | None = None    # (N,) l_i = sum_j exp(s_ij - m_i)
    lse: torch.Tensor | None = None        # (N,) m_i + log l_i (-inf on a row that sees nothing)

    @property
    def ok(self) -> bool:
        """Whether every check passed."""
        return all(c.passed for c in self.checks)


def _round(t: torch.Tensor) -> torch.Tensor:
    # + 0.0 turns the -0.0 of rounding into 0.0 so it prints as 0.000
    return torch.round(t * 10) / 10 + 0.0


def _projections(d_model: int, d: int, seed: int) -> tuple[torch.Tensor, ...]:
    """W_Q, W_K, W_V (D_model, D_k), drawn as at initialisation (std 1/sqrt(D_model))."""
    g = torch.Generator().manual_seed(seed)
    return tuple(_round(torch.randn(d_model, d, generator=g, dtype=torch.float64)
                        / math.sqrt(d_model)) for _ in range(3))


def embedded_example(text: str = BUILTIN_TEXT, d: int = 4, seed: int = 7,
                     d_model: int = D_MODEL) -> Inputs:
    """X from the embedded all-MiniLM-L6-v2: each token's 384-dim word embedding projected on
    the first ``d_model`` principal components of 3000 vocabulary embeddings (so that tokens
    the model finds alike stay alike), scaled to unit spread and rounded to 0.1; W_Q, W_K, W_V
    drawn at random (seed ``seed``), as before training."""
    from safetensors import safe_open

    from attnlab.nn.bert import load_tokenizer, resolve_model_path

    path = resolve_model_path("default")
    with safe_open(str(path / "model.safetensors"), "pt") as f:
        table = f.get_tensor("embeddings.word_embeddings.weight").double()
    tok = load_tokenizer(path)
    ids = tok(text, add_special_tokens=False)["input_ids"]
    if not ids or len(ids) > MAX_TOKENS:
        raise ValueError(f"text has {len(ids)} tokens; explain prints every matrix in full and "
                         f"takes 1 to {MAX_TOKENS}")
    sample = table[1000:4000]                    # wordpieces, past [unused] and punctuation
    mean = sample.mean(0)
    _, _, vt = torch.linalg.svd(sample - mean, full_matrices=False)
    basis = vt[:d_model].T                                           # (384, D_model)
    spread = ((sample - mean) @ basis).std()
    x = _round((table[ids] - mean) @ basis / spread)
    return Inputs(tok.convert_ids_to_tokens(ids), x, *_projections(d_model, d, seed),
                  f"X: all-MiniLM-L6-v2's token embeddings of {text!r} (384 dims, projected on "
                  f"{d_model} principal components, rounded to 0.1); W_Q, W_K, W_V random "
                  f"(seed {seed}), as before training")


def random_example(n: int = 6, d: int = 4, seed: int = 0, d_model: int | None = None) -> Inputs:
    """Random token vectors X (N, D_model = 2 D_k) and projections, rounded to 0.1."""
    d_model = 2 * d if d_model is None else d_model
    g = torch.Generator().manual_seed(seed)
    x = _round(torch.randn(n, d_model, generator=g, dtype=torch.float64))
    return Inputs([f"t{i}" for i in range(n)], x, *_projections(d_model, d, seed + 1),
                  f"X: random token vectors (seed {seed}), W_Q, W_K, W_V random")


def example(n: int | None = None, d: int | None = None, seed: int | None = None):
    """Tokens and Q, K, V (float64) projected from token vectors: with no arguments the
    built-in sentence with D_k = 4 (:func:`embedded_example`), else a random one
    (:func:`random_example`). See :func:`inputs_for` for X and W too."""
    ex = inputs_for(n, d, seed)
    return ex.tokens, ex.q, ex.k, ex.v


def inputs_for(n: int | None = None, d: int | None = None, seed: int | None = None) -> Inputs:
    """The :class:`Inputs` that :func:`example` projects."""
    if n is None and d is None and seed is None:
        return embedded_example()
    return random_example(6 if n is None else n, 4 if d is None else d,
                          0 if seed is None else seed)


def walk(tokens: list[str], q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *,
         causal: bool = False, window: int | tuple[int | None, int | None] | None = None,
         temperature: float = 1.0, tol: float = 1e-12, inputs: Inputs | None = None
         ) -> Walkthrough:
    """Compute each step by the formula and check it against the library. ``inputs``: the X
    and W_Q, W_K, W_V that q, k, v were projected from (shown first)."""
    n_q, n_k, d = q.shape[0], k.shape[0], q.shape[1]
    # Validate through the core first, so bad options get the core's messages.
    attention(q, k, v, causal=causal, window=window, temperature=temperature, backend="reference")
    scale = 1.0 / math.sqrt(d)
    w = (window, window) if isinstance(window, int) else window
    fns = []
    if causal:
        fns.append(masks.causal(offset=n_k - n_q))
    if w is not None:
        fns.append(masks.window(w[0], w[1], offset=n_k - n_q))
    keep = (masks.materialize(masks.and_masks(*fns), n_q, n_k)[0, 0] if fns
            else torch.ones(n_q, n_k, dtype=torch.bool))

    s = q @ k.T                                                  # (N_q, N_k)
    unmasked = s * scale / temperature
    scaled = unmasked.masked_fill(~keep, float("-inf"))
    row_max = torch.full((n_q,), float("-inf"), dtype=s.dtype)
    exps = torch.zeros_like(scaled)
    row_sum = torch.zeros(n_q, dtype=s.dtype)
    a = torch.zeros_like(scaled)
    for i in range(n_q):                                         # softmax, one row at a time
        if keep[i].any():
            row_max[i] = scaled[i].max()                         # m_i: exp never overflows
            exps[i] = torch.exp(scaled[i] - row_max[i])          # 0 where masked
            row_sum[i] = exps[i].sum()                           # l_i >= 1 (the max gives 1)
            a[i] = exps[i] / row_sum[i]
    lse = torch.where(keep.any(-1), row_max + torch.log(row_sum), float("-inf"))
    o = a @ v                                                    # (N_q, D_v)

    wt = Walkthrough(tokens, q, k, v, scale, temperature, causal, w, keep, s, scaled, a, o,
                     inputs=inputs, unmasked=unmasked, row_max=row_max, exps=exps,
                     row_sum=row_sum, lse=lse)
    if inputs is not None:
        wt.source = inputs.source
    empty = ~keep.any(-1)
    row_sums = a.sum(-1)
    wt.checks.append(Check("A >= 0", bool((a >= 0).all()), f"min {float(a.min()):.3g}"))
    err_sum = float((row_sums[~empty] - 1).abs().max()) if (~empty).any() else 0.0
    wt.checks.append(Check("rows of A sum to 1", err_sum <= tol, f"max |sum - 1| = {err_sum:.2e}"))
    wt.checks.append(Check("A = 0 where masked", bool((a[~keep] == 0).all()),
                           f"{int((~keep).sum())} masked entries"))
    if empty.any():
        wt.checks.append(Check("fully masked rows give O = 0", bool((o[empty] == 0).all()),
                               f"{int(empty.sum())} rows"))
    ref = attention(q, k, v, causal=causal, window=window, temperature=temperature,
                    backend="reference", return_weights=True, return_lse=True)
    err_a = float((ref.weights - a).abs().max())
    wt.checks.append(Check("formula = reference backend", err_a <= tol and
                           float((ref.out - o).abs().max()) <= tol, f"max |dA| = {err_a:.2e}"))
    live = ~empty
    err_l = float((ref.lse[live] - lse[live]).abs().max()) if live.any() else 0.0
    wt.checks.append(Check("lse = m + log l equals the reference's log-sum-exp",
                           err_l <= tol * max(1.0, float(lse[live].abs().max()) if live.any()
                                              else 1.0), f"max |d lse| = {err_l:.2e}"))

    for name, backend in list_backends().items():
        if not backend.capabilities.exact:
            wt.backends[name] = "approximate: not compared"
            continue
        try:
            out = attention(q, k, v, causal=causal, window=window, temperature=temperature,
                            backend=name)
        except ValueError as exc:
            wt.backends[name] = f"cannot serve: {exc}"
            continue
        err = float((out - o).abs().max())
        wt.checks.append(Check(f"backend {name} gives the same O", err <= tol,
                               f"max |O - O_formula| = {err:.2e}"))
    return wt


def _entropy_lines(scores: torch.Tensor, keep: torch.Tensor) -> tuple[float, float, float]:
    """(largest weight per row, entropy, entropy of uniform weights over each row's visible
    keys), averaged over the rows that see a key."""
    from attnlab.core.stats import reference_stats

    live = keep.any(-1)
    a = torch.softmax(scores.masked_fill(~keep, float("-inf"))[live], dim=-1)
    st = reference_stats(a)
    uniform = torch.log(keep[live].sum(-1).double())
    return float(st.max_weight.mean()), float(st.entropy.mean()), float(uniform.mean())


def softmax_jacobian_norm(scores: torch.Tensor) -> float:
    """Mean over rows of ||diag(a) - a a^T||_F, the softmax's Jacobian: how much the weights
    move when the scores do (0 for a one-hot row: a saturated softmax passes no gradient)."""
    a = torch.softmax(scores, dim=-1)
    jac = torch.diag_embed(a) - a.unsqueeze(-1) * a.unsqueeze(-2)
    return float(jac.flatten(-2).norm(dim=-1).mean())


def unscaled_note(wt: Walkthrough) -> list[str]:
    """What the 1/sqrt(D_k) scale prevents, on this walk's own Q and K: the largest weight of
    each row and the rows' entropy (against uniform weights over the keys each row sees) with
    and without the scale."""
    lines = []
    for tag, c in (("with 1/sqrt(D_k)", wt.scale / wt.temperature),
                   ("without the scale", 1.0 / wt.temperature)):
        peak, ent, uniform = _entropy_lines(wt.s * c, wt.keep)
        lines.append(f"{tag}: score std {float((wt.s * c)[wt.keep].std()):.2f}, largest weight "
                     f"per row {peak:.2f} on average, entropy {ent:.2f} nats (uniform over the "
                     f"visible keys: {uniform:.2f})")
    return lines


@dataclass
class Saturation:
    """Scaled against unscaled scores at one D_k, for random unit-variance q and k."""
    d_k: int
    n: int
    rows: list[tuple[str, float, float, float, float, float]]  # tag, std, peak, H, uniform, |J|


def saturation(d_k: int = 256, n: int = 16, seed: int = 0) -> Saturation:
    """q, k with unit-variance entries (what LayerNorm gives a projection's input, roughly):
    q . k has standard deviation sqrt(D_k), so without the scale the softmax saturates as D_k
    grows: one weight near 1, the Jacobian near 0."""
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(n, d_k, generator=g, dtype=torch.float64)
    k = torch.randn(n, d_k, generator=g, dtype=torch.float64)
    s = q @ k.T
    keep = torch.ones(n, n, dtype=torch.bool)
    rows = []
    for tag, c in (("with 1/sqrt(D_k)", d_k ** -0.5), ("without the scale", 1.0)):
        peak, ent, uniform = _entropy_lines(s * c, keep)
        rows.append((tag, float((s * c).std()), peak, ent, uniform,
                     softmax_jacobian_norm(s * c)))
    return Saturation(d_k, n, rows)
