"""One table of head labels, read by the full maps (:mod:`attnlab.inspect.taxonomy`) and by
the census (:mod:`attnlab.inspect.census`): the same head of the same text gets the same label
whichever route measured it.

Both routes take each query row's statistics from :mod:`attnlab.core.stats` (dense weights
through ``reference_stats``, long context through the tiled ``attention_stats``) and reduce
them here, with :func:`summarize`, to one mean per head over the rows that count (real tokens
that see a key). :func:`label_heads` then applies :data:`RULES` in order; the first rule whose
statistic reaches its threshold names the head, and a head that meets none is
:data:`NONE`. A rule whose statistic the route did not measure (sentence pairs, special
tokens, duplicate tokens) is passed over.

Thresholds, with their sources:

* **induction**: prefix-matching score (``match_mass``, the mass on keys that follow an earlier
  occurrence of the query's token, over the queries that have one) > 0.5. Olsson et al. (2022)
  rank heads by the score without a cut-off; 0.5 is attnlab's.
* **retrieval**: Wu et al. (2024)'s retrieval score above 0.1, where a needle test measured
  it (:mod:`attnlab.inspect.retrieval`, attached with ``Census.relabel``).
* **duplicate token**: mass on earlier copies of the query's token > 0.5 (Olsson et al. 2022's
  detector; 0.5 attnlab's).
* **previous / next token, self**: more than 50% of the mass on that key (Clark et al. 2019,
  section 4.1), or that key alone holds the largest weight for at least 90% of the queries
  (Voita et al. 2019, section 4.2). A row whose largest weight two keys share counts for
  neither.
* **sink**: mass on the first real token > 0.3 (Gu et al. 2024's sink metric, epsilon = 0.3).
* **special token**: mass on [SEP] and on "." and "," > 0.5 (Clark et al. 2019, section 3).
* **block**: at least 90% of the mass within the query's own sentence of a pair (Kovaleva et al.
  2019 describe the pattern; 0.9 is attnlab's).
* **local**: mass within ``band`` positions of the query (16 by default) > 0.8 (attnlab's).
  Not given where the band covers so much of the text that a uniform head would have half its
  mass inside it (``local_uniform`` >= 0.5: a 40-token causal text); the census then says so
  in a note.
* **broad**: mean entropy at least 80% of the uniform entropy over the keys each query sees,
  ``ln(i + 1)`` for a causal head and ``ln n`` otherwise (attnlab's; Clark et al. 2019, section
  3.3, call heads broad at an average entropy above 3.8 nats on 128-token segments, 78% of
  ``ln 128``).
* **heterogeneous**: none of these (Kovaleva et al. 2019's word for attention without one
  pattern).

Every rule but broad is compared with what a uniform head (the same weight on every real key
a query sees) scores on the same rows (:func:`uniform_rows`): where the uniform head alone
reaches the threshold (the sink rule below 10 causal tokens, where its first-token mass is
H_N / N; self at 2 tokens), the label is withheld and :func:`withheld_notes` says why. Broad is
the distance from that uniform head itself, so a uniform head is broad (or none of these on
rows too short to tell). A label read on a subset of the rows (induction, duplicate token, an
argmax share) needs at least :data:`MIN_ROWS` of them.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

ARGMAX = 0.9          # Voita et al. 2019: a relative position holds the argmax this often
# A label read from a subset of the rows (induction: the queries with an earlier match;
# duplicate token: with an earlier copy; previous / next / self by argmax: the rows where that
# key exists) needs at least this many of them: below it one query moves the mean by more than
# 1/8, and one repeated word in a 13-token sentence labelled 39 of SmolLM2's heads.
MIN_ROWS = 8
NEAR_UNIFORM = 0.95   # entropy ratio flagged as near-uniform (degenerate)


@dataclass(frozen=True)
class Rule:
    """A label: the per-head statistic it reads, its threshold, a letter for grids and where
    the threshold comes from. ``argmax``: a second statistic (a fraction of the queries) that
    also gives the label at :data:`ARGMAX` or more."""

    label: str
    statistic: str
    threshold: float
    letter: str
    source: str
    strict: bool = True                 # "more than" (masses); else "at least"
    argmax: str | None = None
    unless: str | None = None           # not given where this statistic is 0.5 or more
    rows: str | None = None             # the count of the rows the statistic is read from
    baseline: bool = True               # withheld where a uniform head meets it too

    def _reaches(self, v) -> bool:
        return v is not None and (v > self.threshold if self.strict else v >= self.threshold)

    def met(self, values: dict) -> bool:
        """Whether a head's statistics ``{name: float}`` meet the rule: its statistic reaches
        the threshold (or its argmax share :data:`ARGMAX`, on at least :data:`MIN_ROWS` rows),
        and the rule is not withheld on these rows (:meth:`withheld`)."""
        if self.withheld(values) is not None:
            return False
        extra = values.get(self.argmax) if self.argmax else None
        if extra is not None and values.get(self.argmax + "_rows", MIN_ROWS) < MIN_ROWS:
            extra = None
        if extra is not None and values.get(self.argmax + "_uniform", 0.0) >= ARGMAX:
            extra = None
        return self._reaches(values.get(self.statistic)) or (
            extra is not None and extra >= ARGMAX)

    def withheld(self, values: dict) -> str | None:
        """Why the rule gives no label on these rows, whatever the head does (None where it
        can): ``"uniform"`` where a uniform head over the same rows (``<statistic>_uniform``)
        reaches the threshold too, ``"rows"`` where fewer than :data:`MIN_ROWS` rows qualify
        (``rows``), ``"band"`` where the local band holds half of a uniform head's mass."""
        if self.unless and values.get(self.unless, 0.0) >= 0.5:
            return "band"
        if self.rows and values.get(self.rows, MIN_ROWS) < MIN_ROWS:
            return "rows"
        if self.baseline and self._reaches(values.get(self.statistic + "_uniform")):
            return "uniform"
        return None

    def describe(self) -> str:
        """``previous token: prev_mass > 0.5 (or argmax >= 0.9)``."""
        op = ">" if self.strict else ">="
        more = f" or {self.argmax} >= {ARGMAX}" if self.argmax else ""
        return f"{self.label}: {self.statistic} {op} {self.threshold:g}{more}"


RULES = (
    Rule("induction", "match_mass", 0.5, "I",
         "Olsson et al. 2022, prefix matching (the 0.5 cut is attnlab's)", rows="match_rows"),
    Rule("retrieval", "retrieval_score", 0.1, "R",
         "Wu et al. 2024, retrieval score of a needle test (inspect.retrieval)"),
    Rule("duplicate token", "dup_mass", 0.5, "D",
         "Olsson et al. 2022, duplicate-token detector (the 0.5 cut is attnlab's)",
         rows="dup_rows"),
    *(Rule(label, f"{key}_mass", 0.5, letter,
           "Clark et al. 2019 (50% of the mass); Voita et al. 2019 (argmax 90%)",
           argmax=f"{key}_argmax")
      for label, key, letter in (("previous token", "prev", "P"), ("next token", "next", "N"),
                                 ("self", "self", "O"))),
    Rule("sink", "sink_mass", 0.3, "S", "Gu et al. 2024, sink metric with epsilon = 0.3"),
    Rule("special token", "special_mass", 0.5, "T",
         "Clark et al. 2019, attention to [SEP], '.' and ','"),
    Rule("block", "within_segment", 0.9, "B",
         "Kovaleva et al. 2019's block pattern (the 0.9 cut is attnlab's)", strict=False),
    Rule("local", "local_mass", 0.8, "L", "attnlab's: mass within the band",
         unless="local_uniform"),
    Rule("broad", "entropy_ratio", 0.8, "W",
         "attnlab's; Clark et al. 2019 report broad heads near 78% of ln 128", strict=False,
         baseline=False),               # the statistic is itself the distance from uniform
)
NONE = "heterogeneous"
LABELS = tuple(r.label for r in RULES) + (NONE,)
LETTERS = {r.label: r.letter for r in RULES} | {NONE: "·"}
THRESHOLDS = {r.statistic: r.threshold for r in RULES}
LABEL_COLORS = dict(zip(LABELS, ["#e377c2", "#843c39", "#bcbd22", "#1f77b4", "#17becf",
                                 "#9467bd", "#d62728", "#ff7f0e", "#8c564b", "#393b79",
                                 "#2ca02c", "#7f7f7f"]),
                    cross="#444444")        # cross-attention heads: no positional class


def rule(label: str) -> Rule:
    """The rule of a label."""
    for r in RULES:
        if r.label == label:
            return r
    raise KeyError(f"no label {label!r}; the labels are {', '.join(LABELS)}")


def legend() -> str:
    """One line: every label's letter and rule."""
    return "; ".join(f"{r.letter} {r.describe()}" for r in RULES) + f"; · {NONE}: none of these"


def label_one(values: dict, skip=()) -> str:
    """The first rule a head's statistics ``{name: float}`` meet, else :data:`NONE`."""
    for r in RULES:
        if r.label not in skip and r.met(values):
            return r.label
    return NONE


def label_heads(summary: dict, skip=()) -> list[list[str]]:
    """Labels ``[layer][head]`` from per-head statistics ``{name: (L, H) tensor or None}``;
    ``skip``: labels not to give (see :func:`local_means_nothing`)."""
    present = {k: v for k, v in summary.items() if v is not None}
    shape = next(iter(present.values())).shape
    return [[label_one({k: float(v[layer, head]) for k, v in present.items()}, skip)
             for head in range(shape[1])] for layer in range(shape[0])]


def uniform_entropy(n_q: int, n_k: int, causal: bool) -> torch.Tensor:
    """``(N_q,)``: the entropy of a uniform row over the keys each query sees, ``ln(p + 1)``
    causal (``p`` the query's aligned position), ``ln N_k`` otherwise; at least ``ln 2``."""
    pos = torch.arange(n_q, dtype=torch.float64) + (n_k - n_q)
    seen = pos + 1 if causal else torch.full((n_q,), float(n_k), dtype=torch.float64)
    return torch.log(seen.clamp_min(2.0))


def local_means_nothing(n: int, band: int, causal: bool) -> float | None:
    """Where a band of ``band`` keys each side covers so much of an ``n``-token text that a
    uniform head would put at least half its mass inside it, that share (the local label then
    says nothing); else None."""
    pos = torch.arange(n, dtype=torch.float64)
    if causal:
        share = ((band + 1) / (pos + 1)).clamp(max=1.0)
    else:
        lo, hi = (pos - band).clamp(min=0), (pos + band).clamp(max=n - 1)
        share = (hi - lo + 1) / n
    mean = float(share.mean())
    return mean if mean >= 0.5 else None


def uniform_rows(n_q: int, n_k: int, causal: bool, *, real: torch.Tensor | None = None,
                 ids: torch.Tensor | None = None, band: int = 16, sink_keys: int = 1) -> dict:
    """What a uniform head scores on each row ``(N_q,)``: every real key the query sees gets
    the same weight. The masses of the rules (``sink_mass``, ``prev_mass``, ``self_mass``,
    ``next_mass``, ``local_mass``; with token ``ids``, ``match_mass`` and ``dup_mass``) and
    ``self_argmax`` (a row that sees one key has its argmax there; otherwise every key ties)."""
    key_real = (torch.ones(n_k, dtype=torch.bool) if real is None
                else torch.as_tensor(real).reshape(-1).bool())
    cum = torch.cat([torch.zeros(1), key_real.double().cumsum(0)])      # cum[j]: real < j
    pos = torch.arange(n_q) + (n_k - n_q)
    hi = pos if causal else torch.full((n_q,), n_k - 1)
    seen = (cum[hi + 1] - cum[0]).clamp_min(1.0)
    sink_real = key_real.nonzero().flatten()[:sink_keys]
    sinks = (sink_real[None, :] <= hi[:, None]).sum(-1).double() if sink_real.numel() else \
        torch.zeros(n_q, dtype=torch.float64)
    one = 1.0 / seen

    def real_at(j):
        ok = (j >= 0) & (j < n_k)
        return ok & key_real[j.clamp(0, n_k - 1)]

    lo = (pos - band).clamp(min=0)
    top = torch.minimum(pos + band, hi)
    out = {"sink_mass": sinks / seen, "prev_mass": torch.where(real_at(pos - 1), one, 0.0),
           "self_mass": torch.where(real_at(pos), one, 0.0),
           "next_mass": torch.where(real_at(pos + 1) & (pos + 1 <= hi), one, 0.0),
           "local_mass": (cum[top + 1] - cum[lo]) / seen,
           "self_argmax": ((seen == 1) & real_at(pos)).double()}
    if ids is not None and n_q == n_k:
        toks, keep = ids.reshape(-1).tolist(), key_real.tolist()
        copies, matches, before, earlier2 = [], [], {}, {}
        for i, t in enumerate(toks):
            if i >= 2 and keep[i - 2]:                  # keys j <= i - 1 follow position j - 1
                earlier2[toks[i - 2]] = earlier2.get(toks[i - 2], 0) + 1
            copies.append(before.get(t, 0))
            matches.append(earlier2.get(t, 0))
            if keep[i]:
                before[t] = before.get(t, 0) + 1
        out["dup_mass"] = torch.tensor(copies, dtype=torch.float64) / seen
        out["match_mass"] = torch.tensor(matches, dtype=torch.float64) / seen
    return out


def summarize(rows: dict, counted: torch.Tensor, *, causal, ids: torch.Tensor | None = None,
              real: torch.Tensor | None = None, band: int = 16, sink_keys: int = 1) -> dict:
    """Per-head means ``(L, H)`` of row statistics ``{name: (L, H, N_q)}`` (those of
    :class:`attnlab.core.stats.AttentionStats`) over the rows that count, ``counted
    (L, H, N_q)``; the one reduction both routes use.

    Adds ``entropy_ratio`` (each row's entropy over :func:`uniform_entropy`; ``causal``: one
    bool per layer), ``prev_argmax`` / ``next_argmax`` / ``self_argmax`` (the share of the rows
    with that key in range whose single largest weight is on it) and, with token ``ids``,
    ``match_mass`` and ``dup_mass`` as the means over the queries that have an earlier match
    or copy only (Olsson et al.'s prefix-matching and duplicate-token scores), and
    ``local_uniform``, the local mass a uniform head would have at this length with this
    ``band`` (0 where it is below one half; see :func:`local_means_nothing`).

    Also, for each rule's statistic, ``<statistic>_uniform``: what a uniform head scores on the
    same rows (:func:`uniform_rows`; a rule it reaches is withheld, see :meth:`Rule.withheld`),
    and the number of rows a subset statistic reads: ``match_rows``, ``dup_rows``,
    ``prev_argmax_rows``, ``next_argmax_rows``, ``self_argmax_rows``."""
    counted = counted.bool()
    n_l, _, n_q = counted.shape
    n_k = rows["received"].shape[-1] if rows.get("received") is not None else n_q

    def mean(t, keep=counted):
        keep = keep & counted
        return (torch.where(keep, t.double(), 0.0).sum(-1)
                / keep.sum(-1).clamp_min(1)).float()

    out = {}
    for name in ("entropy", "max_weight", "sink_mass", "prev_mass", "self_mass", "next_mass",
                 "local_mass", "distance", "sink_mass_vw", "prev_mass_vw", "self_mass_vw",
                 "local_mass_vw"):
        if rows.get(name) is not None:
            out[name] = mean(rows[name])
    if isinstance(causal, bool):
        causal = [causal] * n_l
    uniform = torch.stack([uniform_entropy(n_q, n_k, bool(c)) for c in causal])   # (L, N_q)
    out["entropy_ratio"] = mean(rows["entropy"].double() / uniform[:, None, :])
    share = local_means_nothing(n_q, band, all(bool(c) for c in causal))
    out["local_uniform"] = torch.full(counted.shape[:2], share or 0.0)
    pos = torch.arange(n_q) + (n_k - n_q)
    argmax, tied = rows.get("argmax"), rows.get("tied")
    if argmax is not None:
        single = ~tied if tied is not None else torch.ones_like(counted)
        for name, o in (("prev_argmax", -1), ("next_argmax", 1), ("self_argmax", 0)):
            target = pos + o
            valid = ((target >= 0) & (target < n_k))[None, None, :]
            hit = (argmax == target[None, None, :]) & single
            out[name] = mean(hit.double(), counted & valid)
    subsets = {}
    if argmax is not None:
        for name, o in (("prev_argmax", -1), ("next_argmax", 1), ("self_argmax", 0)):
            target = pos + o
            subsets[name] = ((target >= 0) & (target < n_k))[None, None, :]
    if ids is not None and rows.get("match_mass") is not None:
        subsets["match_mass"] = earlier_match(ids, real)[None, None, :]
        out["match_mass"] = mean(rows["match_mass"], counted & subsets["match_mass"])
        if rows.get("match_mass_vw") is not None:
            out["match_mass_vw"] = mean(rows["match_mass_vw"], counted & subsets["match_mass"])
    if ids is not None and rows.get("dup_mass") is not None:
        subsets["dup_mass"] = earlier_copy(ids, real)[None, None, :]
        out["dup_mass"] = mean(rows["dup_mass"], counted & subsets["dup_mass"])
    for name, rows_name in (("match_mass", "match_rows"), ("dup_mass", "dup_rows"),
                            ("prev_argmax", "prev_argmax_rows"),
                            ("next_argmax", "next_argmax_rows"),
                            ("self_argmax", "self_argmax_rows")):
        if name in subsets:
            out[rows_name] = (counted & subsets[name]).sum(-1).float()
    # a uniform head on the same rows, layer by layer (causal or not)
    n_h = counted.shape[1]
    once = {c: uniform_rows(n_q, n_k, c, real=real, ids=ids, band=band, sink_keys=sink_keys)
            for c in {bool(c) for c in causal}}            # once per kind of layer, not per layer
    base = [once[bool(c)] for c in causal]
    for name in base[0]:
        if name not in out:
            continue
        u = torch.stack([b[name] for b in base])[:, None, :].expand(n_l, n_h, n_q)
        out[name + "_uniform"] = mean(u, counted & subsets[name]) if name in subsets \
            else mean(u)
    return out


# the per-head statistics that hold the baselines and row counts (HeadMetrics.baselines)
BASELINE_KEYS = ("sink_mass_uniform", "prev_mass_uniform", "self_mass_uniform",
                 "next_mass_uniform", "local_mass_uniform", "match_mass_uniform",
                 "dup_mass_uniform", "self_argmax_uniform", "match_rows", "dup_rows",
                 "prev_argmax_rows", "next_argmax_rows", "self_argmax_rows")


def withheld_notes(summary: dict) -> list[str]:
    """One sentence per rule that these rows cannot give, whatever a head does: a uniform head
    would reach it too (say with what value), or too few rows qualify (say how many)."""
    present = {k: v for k, v in summary.items() if v is not None}
    notes = []
    for r in RULES:
        if r.statistic not in present or r.unless:           # local: the band's own note
            continue
        first = {k: float(v.reshape(-1)[0]) for k, v in present.items()}
        why = r.withheld(first)
        if why == "uniform":
            base = float(present[r.statistic + "_uniform"].max())
            notes.append(f"no head is labelled {r.label}: on these rows a uniform head scores "
                         f"{base:.2f} {r.statistic}, past the rule's {r.threshold:g}, so the "
                         "label would say nothing; take a longer text")
        elif why == "rows":
            count = int(present[r.rows].max())
            notes.append(f"no head is labelled {r.label}: {count} "
                         f"{'query qualifies' if count == 1 else 'queries qualify'} "
                         f"({r.statistic} is read on them alone) and the label needs "
                         f"{MIN_ROWS}")
    return notes


def earlier(ids: torch.Tensor, real: torch.Tensor | None = None, gap: int = 1) -> torch.Tensor:
    """``(N,)`` bool: token ``ids[i]`` occurred at some real position ``<= i - gap``.
    ``gap=1``: the query has an earlier copy (duplicate-token mass); ``gap=2``: a key
    ``j < i`` follows an earlier occurrence of it (prefix matching)."""
    keep = [True] * ids.numel() if real is None else real.tolist()
    seen, out = set(), []
    toks = ids.tolist()
    for i, tok in enumerate(toks):
        if i >= gap and keep[i - gap]:
            seen.add(toks[i - gap])
        out.append(bool(keep[i]) and tok in seen)
    return torch.tensor(out, dtype=torch.bool)


def earlier_match(ids: torch.Tensor, real: torch.Tensor | None = None) -> torch.Tensor:
    """Queries with a key before them that follows an earlier occurrence of their token."""
    return earlier(ids, real, gap=2)


def earlier_copy(ids: torch.Tensor, real: torch.Tensor | None = None) -> torch.Tensor:
    """Queries whose token occurred at an earlier real position."""
    return earlier(ids, real, gap=1)


# the unit of every statistic, the one table the per-head table and the report read
_ROW = "share of the row"
_OUT = "share of the row's sum a ||v W_O||"
UNITS = {"entropy": "nats", "entropy_ratio": "of uniform", "max_weight": "weight",
         "sink_mass": _ROW, "prev_mass": _ROW, "self_mass": _ROW, "next_mass": _ROW,
         "local_mass": _ROW, "distance": "tokens back", "match_mass": _ROW, "dup_mass": _ROW,
         "retrieval_score": "of copied tokens", "prev_argmax": "of queries",
         "next_argmax": "of queries", "self_argmax": "of queries",
         "importance": "nats (first order)", "sink_mass_vw": _OUT, "prev_mass_vw": _OUT,
         "self_mass_vw": _OUT, "local_mass_vw": _OUT, "match_mass_vw": _OUT,
         "received": "summed over queries", "received_vw": "summed over queries"}
# the per-head table's columns, in order (their units: UNITS)
TABLE_COLUMNS = tuple(name for name in UNITS if not name.startswith("received"))


def head_table(labels: list[list[str]], summary: dict):
    """One row per head (``layer``, ``head``, ``label`` and each statistic of
    :data:`TABLE_COLUMNS` the route measured), a pandas DataFrame: what ``Census.table()`` and
    ``Inspection.table()`` return and ``attnlab inspect --csv`` writes."""
    import pandas as pd

    rows = []
    for layer, row in enumerate(labels):
        for head, label in enumerate(row):
            rec = {"layer": layer, "head": head, "label": label}
            for name in TABLE_COLUMNS:
                t = summary.get(name)
                if t is not None:
                    rec[name] = float(t[layer, head])
            rows.append(rec)
    return pd.DataFrame(rows)


def compare_tables(a, b, names=("a", "b")):
    """Two per-head tables of the same heads side by side (the same text at 1k and 16k
    tokens, two texts, two models of one shape): ``label_a``, ``label_b``, ``changed`` and,
    for every statistic both measured, its two values and ``delta_<name>`` (b - a)."""
    if len(a) != len(b) or not (a[["layer", "head"]].values == b[["layer", "head"]].values).all():
        raise ValueError(f"compare takes two censuses of the same heads; got {len(a)} heads "
                         f"against {len(b)}")
    x, y = names
    out = a[["layer", "head"]].copy()
    out[f"label_{x}"], out[f"label_{y}"] = a["label"].values, b["label"].values
    out["changed"] = out[f"label_{x}"] != out[f"label_{y}"]
    for name in TABLE_COLUMNS:
        if name in a and name in b:
            out[f"{name}_{x}"], out[f"{name}_{y}"] = a[name].values, b[name].values
            out[f"delta_{name}"] = b[name].values - a[name].values
    return out


def near_uniform(entropy_ratio: torch.Tensor) -> list[tuple[int, int]]:
    """Heads whose entropy ratio is at least :data:`NEAR_UNIFORM` (flagged as degenerate)."""
    return [tuple(x) for x in (entropy_ratio >= NEAR_UNIFORM).nonzero().tolist()]


def is_causal(maps: torch.Tensor) -> list[bool]:
    """Per layer of ``maps (L, H, N_q, N_k)``: whether no query puts weight on a later key."""
    n_q, n_k = maps.shape[-2:]
    later = torch.ones(n_q, n_k, dtype=torch.bool).triu(1 + n_k - n_q)
    return [not bool((m[..., later] > 0).any()) for m in maps]
