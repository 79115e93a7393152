"""Hints for the exercises, from a nudge to the full explanation: ``hint("3.1")`` gives the
first, ``hint("3.1", 2)`` the second, and the last one explains the answer without code."""

from __future__ import annotations

HINTS: dict[str, tuple[str, ...]] = {
    "1.1": ("Every score is the same number s: what does that make every weight?",
            "exp(s) appears N times in the sum.",
            "Each weight is 1/N, and log(N e^s) = s + log N."),
    "1.2": ("Differentiate a_i = e^{s_i} / Z with respect to s_j, and treat j = i and j != i "
            "apart.",
            "Z depends on every s_j too: dZ/ds_j = e^{s_j}.",
            "d a_i / d s_i = a_i - a_i^2, d a_i / d s_j = -a_i a_j: J = diag(a) - a a^T, a full "
            "matrix, not a diagonal."),
    "1.3": ("Try your function on scores of 100 or more in float32.",
            "exp(100) overflows float32; what can you subtract from every score of a row "
            "without changing the softmax?",
            "Subtract each row's maximum before exp: the weights are the same, and the largest "
            "exponential is exp(0) = 1."),
    "2.1": ("Which axis holds a token's dimensions, and which numbers does reshape read first?",
            "reshape(H, N, E // H) takes whole tokens in order; head h needs columns "
            "h d_h .. (h + 1) d_h - 1 of every token.",
            "Split the last axis, (N, H, E // H), then move the head axis first: "
            "transpose(0, 1)."),
    "2.2": ("Count the projections: queries, keys, values, and the output.",
            "Each projection is an E x E matrix with a bias of E.",
            "4 E^2 + 4 E: the heads cut the same projections into pieces and add nothing."),
    "2.3": ("A key is real when its position is below the sentence's length.",
            "Compare torch.arange(N) with the lengths to get a (B, N) boolean, then turn True "
            "into 0 and False into -inf.",
            "The mask must broadcast over heads and queries: shape (B, 1, 1, N)."),
    "3.1": ("Everything summed so far was taken relative to the old maximum m.",
            "To move a sum of e^{s - m} to e^{s - m'}, which factor do you multiply by? Is it "
            "larger or smaller than 1 when m' >= m?",
            "e^{m - m'}: computed as one exponential of the difference, it stays finite even "
            "where e^m itself would not (m = 800), and is 0 on the first tile (m = -inf)."),
    "3.2": ("After tile t, the running max is the max of everything seen so far.",
            "The per-tile maxima can fall; the running max cannot.",
            "The cumulative maximum of the tiles' maxima (torch.cummax, or a loop that keeps "
            "max(m, tile max))."),
    "3.3": ("Adding the softmaxes of the chunks gives every chunk a total weight of 1.",
            "Keep a running max m, a running sum l and a running output o; rescale l and o by "
            "e^{m - m'} whenever the max rises.",
            "Per chunk: m' = max(m, max s), p = e^{s - m'}, l = l e^{m - m'} + sum p, "
            "o = o e^{m - m'} + p V; at the end o / l. Never hold more than one chunk's "
            "scores."),
    "4.1": ("Where does your bias enter: before or after the scale 1/sqrt(d)?",
            "A bias added before the scale is divided by sqrt(d) too.",
            "Scale the scores first, then add the mask: a -inf entry stays -inf either way, "
            "but a finite bias must not shrink."),
    "4.2": ("Write out one pair's contribution sin(p w) sin((p+k) w) + cos(p w) cos((p+k) w).",
            "That is a cosine of a difference.",
            "Each pair gives cos(k w_i), whatever p is; sum over the d/2 frequencies "
            "w_i = 10000^(-2i/d)."),
    "4.3": ("Without positions, output t is token t's query averaged over the set of tokens "
            "0..t.",
            "Which of these sets change when the tokens at i and j trade places? And which "
            "queries?",
            "Outputs before i see nothing change; from i to j the set or the query changes; "
            "after j both are the same again."),
    "5.1": ("The weight alone ignores the value it multiplies.",
            "||alpha_ij v_j|| = alpha_ij ||v_j||.",
            "Scale column j by ||v_j||, then normalise each row to sum to 1."),
    "5.2": ("Layer l acts on what the layers below it produced.",
            "Which side does each new layer's map multiply from?",
            "R = Â_L ... Â_2 Â_1: each new layer multiplies from the left."),
    "5.3": ("U = (1/n) 1 1^T is idempotent: U U = U.",
            "Expand (r I + (1 - r) U)^L: every term that holds a U is U.",
            "Â^L = r^L I + (1 - r^L) U: the self weight is r^L + (1 - r^L)/n, every other "
            "(1 - r^L)/n."),
    "6.1": ("q . k is a sum of d products of independent unit-variance numbers.",
            "Variances of independent terms add; the function asks for standard deviations.",
            "Var(q . k) = d, so the standard deviation is sqrt(d); divided by sqrt(d) it is 1."),
    "6.2": ("Dropout zeroes each weight with probability p. What happens to the expected "
            "output?",
            "The kept weights must be rescaled so that the expectation is unchanged.",
            "Multiply the kept weights by 1 / (1 - p); use the generator you are given for the "
            "mask, and drop nothing when p = 0."),
    "6.3": ("Divide numerator and denominator by e^{max s / T}.",
            "As T -> 0, each term e^{(s_j - max s)/T} goes to 0 or stays 1. As T -> infinity, "
            "every exponent goes to 0.",
            "Cold: equal weight on the tied maxima, 0 elsewhere. Hot: 1/N everywhere."),
    "7.1": ("Expand -(q - k)^2 / (2 sigma^2).",
            "The q^2 term is the same along a row and drops out of the softmax. Does the k^2 "
            "term?",
            "Scores q k / sigma^2 - k^2 / (2 sigma^2): the key's own term changes with the key "
            "and must stay."),
    "7.2": ("What does the softmax do when one score is far above the others?",
            "As sigma -> 0, the nearest key's weight beats every other by "
            "exp(gap / 2 sigma^2).",
            "The estimate becomes the value of the nearest key: nearest-neighbour regression."),
    "7.3": ("Minimise the leave-one-out error over sigma.",
            "A grid of widths (or gradient descent on log sigma) with loo_mse as the loss.",
            "Pick the sigma with the smallest loo_mse on the sample you are given."),
    "8.1": ("What does the cache keep for each position?",
            "Keys and values, in every layer, for every K/V head.",
            "2 x layers x kv_heads x head_dim x tokens x batch x bytes_per."),
    "8.2": ("The new key and value join the cache before the query attends.",
            "The one new query attends over every position held, its own included.",
            "Concatenate k_new and v_new to the caches on the position axis, then a softmax "
            "over all of them."),
    "8.3": ("Query head h must read K/V head h // (n_heads // H_kv).",
            "repeat tiles the heads (0, 1, 0, 1, ...); you need (0, 0, 0, 1, 1, 1).",
            "repeat_interleave on the head axis."),
    "9.1": ("W s is one vector per sequence, U h_j one per position: they must meet.",
            "Add a position axis to s @ W.T so that it broadcasts against h @ U.T.",
            "e_j = v . tanh(W s + U h_j): the tanh acts on the sum, and v reduces each "
            "position's vector to one number."),
    "9.2": ("Reversal writes input digit L - 1 - t at step t.",
            "Where is the one in row t?",
            "The identity flipped left to right."),
    "9.3": ("What weight does a padding position get from a plain softmax?",
            "Set the padding scores to -inf before the softmax.",
            "softmax(e.masked_fill(~keep, -inf)) over the source positions."),
    "10.1": ("The n_q queries are the last n_q of the n_k positions.",
             "Query i is position n_k - n_q + i; which keys come after it?",
             "Key j is masked when j > i + n_k - n_q: the diagonal moves right by n_k - n_q."),
    "10.2": ("A candidate's total has two parts.",
             "Rank by the parent beam's score plus the token's log-probability, over all k V "
             "candidates at once.",
             "Flatten (k, V), take topk; candidate c is parent c // V, token c % V."),
    "10.3": ("Where does target token t enter the decoder under teacher forcing?",
             "The input is shifted right behind a start token: token t is input t + 1.",
             "Outputs t + 1 .. n - 1 can read it; output t predicts it and cannot."),
    "11.1": ("Rotations compose: R(a)^T R(b) = R(b - a).",
             "The score of R(m theta) q and R(n theta) k depends only on n - m.",
             "q . R(delta theta) k: rotate k by delta theta, then the dot product."),
    "11.2": ("Pair i turns at frequency w_i = 10000^(-2i/d) per position.",
             "Over offsets 0 .. n_train - 1 it turns (n_train - 1) w_i.",
             "The pairs with (n_train - 1) w_i < 2 pi."),
    "11.3": ("Which positions are the new queries?",
             "They are the last n_q of the n_k positions, not positions 0..n_q - 1.",
             "Rotate the keys by 0..n_k - 1 and the queries by n_k - n_q .. n_k - 1 "
             "(RotaryEmbedding takes both and aligns them bottom-right)."),
    "12.1": ("A plain reshape takes p consecutive pixels of a row, not a p x p square.",
             "Split both image axes into (grid, within patch).",
             "reshape(B, H/p, p, W/p, p), bring the two grid axes together, then flatten each "
             "patch's p x p pixels."),
    "12.2": ("How many tokens does the transformer see per image?",
             "(image / patch)^2 patches, and one more token.",
             "layers x heads x ((image / patch)^2 + 1)^2, the class token included."),
    "12.3": ("Over which axis does a node's softmax run?",
             "Node i distributes its weight over its neighbours j: the last axis.",
             "softmax(e.masked_fill(~adjacency, -inf), dim=-1)."),
    "13.1": ("Each query would see 2w + 1 keys. Do the first and last ones?",
             "The first w queries lose w, w - 1, ..., 1 keys on the left; the last w the same "
             "on the right.",
             "N (2w + 1) - w (w + 1) for w < N; every pair, N^2, when the window covers all."),
    "13.2": ("phi(Q) phi(K)^T is N x N. Can you multiply in another order?",
             "phi(K)^T V is (m, D) and the sum of phi(k_j) is (m,).",
             "out = phi(Q) (phi(K)^T V) / (phi(Q) sum_j phi(k_j)): nothing is N x N."),
    "13.3": ("How many keys does your mask keep for a query in the middle?",
             "window=(w, w) keeps w keys on each side and the query's own.",
             "|i - j| <= w, with <=."),
    "14.1": ("lse = log(e^{lse_1} + e^{lse_2}); what happens to e^{lse} at 800?",
             "Factor out the larger lse before exponentiating. What if both parts are empty "
             "(lse -inf)?",
             "m = max(l1, l2) (0 where both are -inf); lse = m + log(e^{l1 - m} + e^{l2 - m}); "
             "o = e^{l1 - lse} o1 + e^{l2 - lse} o2."),
    "14.2": ("Under a causal mask, query i sees i + 1 keys.",
             "Rank r holds queries r b .. (r + 1) b - 1 with b = N / P.",
             "Sum i + 1 over each rank's queries."),
    "14.3": ("The last rank holds the last rows, which see the most keys.",
             "Cut the rows into 2P chunks and give each rank an early chunk and a late one.",
             "Rank r holds chunks r and 2P - 1 - r."),
    "15.1": ("Chapter 3's running max and sum carry over; what else does the entropy need?",
             "H = lse - sum_j a_j s_j. Keep a running u = sum e^{s - m} s beside l = sum "
             "e^{s - m}, rescaled by e^{m - m'} like l.",
             "At the end lse = m + log l, H = lse - u / l, and the sink mass is "
             "e^{s_0 - lse} (key 0's score, kept from the first tile)."),
    "15.2": ("On BOS A A, a query in the second A has seen its own token once before.",
             "Record the maps (attnlab.inspect.capture.record) and, for each head, average the "
             "weight each second-copy query puts on the key just after its token's first "
             "occurrence.",
             "attnlab.inspect.heads.induction_scores(maps, ids) gives that score per head; keep "
             "the heads whose score is high (above 0.5 every head must be named; below 0.2 "
             "none may be)."),
    "15.3": ("Zero a head's output where the heads are concatenated, before the output "
             "projection.",
             "A forward pre-hook on self_attn.o_proj can zero the head's d columns of its input; "
             "remove it afterwards.",
             "Loss before and after on the second copy of A (positions after its first token), "
             "with attnlab.inspect.ablation.ablate_heads or your own hook."),
    "16.1": ("A key's part of the head's output is a_ij times what it writes, v_j W_O; the "
             "weight alone leaves out the second factor.",
             "Measure what key j writes by the norm of v_j W_O, one number per key, and weigh "
             "it by the row's weights.",
             "n = (v @ w_o).norm(dim=-1); the share of key 0 is a[:, 0] * n[0] over the row's "
             "sum a @ n."),
    "16.2": ("A gate g multiplying a head's output has dL/dg = sum_t <o_h,t, dL/do_h,t> at "
             "g = 1: the first-order change of the loss when the head is removed.",
             "A forward pre-hook on self_attn.o_proj sees every head's output side by side; keep "
             "that input, make it require a gradient, and run backward from the loss of the "
             "second copy (the same positions as second_copy_nats).",
             "Reshape the kept input and its gradient to (positions, heads, d), multiply, sum "
             "over positions and d per head, take the absolute value; remove the hooks after."),
    "16.3": ("Relevance keeps only the products that push the loss up: a_ij times dL/da_ij, "
             "where it is positive.",
             "Multiply the map by its gradient entry by entry, clip at zero, then gather over "
             "the queries.",
             "(a * grad).clamp_min(0).sum(0): clip each product before summing over the rows "
             "(dim 0), one number per key."),
}


class Hint(str):
    """A hint's text, printed once: a notebook does not show it a second time as the cell's
    value."""

    def _ipython_display_(self) -> None:
        pass


def hint(exercise: str, n: int = 1) -> str:
    """The ``n``-th hint to ``exercise`` (1 is a nudge, the last explains the answer); printed
    and returned (as a :class:`Hint`, which a notebook does not show again)."""
    if exercise not in HINTS:
        raise ValueError(f"exercise must be one of {', '.join(HINTS)}, got {exercise!r}")
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise ValueError(f"n must be an int >= 1, got {n!r}")
    hints = HINTS[exercise]
    text = hints[min(n, len(hints)) - 1]
    more = (f" (hint {n} of {len(hints)}; hint(\"{exercise}\", {n + 1}) for more)"
            if n < len(hints) else f" (the last of {len(hints)} hints)")
    line = f"exercise {exercise}, hint {min(n, len(hints))}: {text}{more}"
    print(line)
    return Hint(line)
