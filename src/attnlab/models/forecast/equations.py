"""The forecaster's equations and symbol table, with its fitted sizes: what ``to_latex``,
``to_markdown`` and the paper print."""

from __future__ import annotations

from attnlab.models.latex import Equations


def _pooling(L: int, d: int) -> list[tuple[str, str]]:
    """Query from the last state, keys from every state, the weights and the context: the
    attention pooling both forecasters share."""
    return [
        (r"\mathbf{q}", r"\mathbf{W}_q \mathbf{h}_L + \mathbf{b}_q, \quad \mathbf{k}_t = "
         r"\mathbf{W}_k \mathbf{h}_t + \mathbf{b}_k, \quad \mathbf{v}_t = \mathbf{h}_t"),
        (r"\alpha_t", r"\frac{\exp\left(\mathbf{q}^\top \mathbf{k}_t / \sqrt{" + str(d)
         + r"}\right)}{\sum_{\tau=1}^{" + str(L) + r"} \exp\left(\mathbf{q}^\top "
         r"\mathbf{k}_\tau / \sqrt{" + str(d) + r"}\right)}"),
        (r"\mathbf{c}", r"\sum_{t=1}^{" + str(L) + r"} \alpha_t \mathbf{v}_t"),
    ]


def forecaster_equations(model) -> Equations:
    """The equations of an :class:`~attnlab.models.forecast.AttentionForecaster` (fitted or
    not: the fitted base, ``w`` and sizes where known)."""
    L, H, d = model.effective_lookback, model.horizon, model.hidden_size
    n_in = getattr(model, "n_features_", 2 + (2 if model.effective_season > 1 else 0))
    if model.encoder == "transformer":
        enc = _transformer_encoder(model.num_layers, L, d)
    else:
        cell = model.encoder.upper()
        enc = (r"\mathbf{h}_t", r"\mathrm{" + cell + r"}\left(\mathbf{x}_t, "
               r"\mathbf{h}_{t-1}\right) \in \mathbb{R}^{" + str(d) + r"}, \quad t = 1, "
               r"\ldots, " + str(L))
    n_fut = getattr(model, "n_future_", 0)
    m = model.effective_season
    base = getattr(model, "base_name_", None) or (
        model.base if model.base != "auto" else None)
    if base == "seasonal_naive" and m > 1:
        ref = r"y_{L + h - " + str(m) + r" \lceil h / " + str(m) + r" \rceil}"
    elif base in ("naive", "seasonal_naive"):
        ref = "y_L"
    elif base == "none":
        ref = r"\mu"
    else:
        ref = r"\hat{y}^{\mathrm{base}}_{L+h}"
    lines = [
        (r"\mathbf{x}_t", r"\left[\frac{y_t - y_L}{s_\Delta}, \frac{y_t - \mu}{\sigma}"
         + (r", \mathbf{z}_t" if getattr(model, "n_exog_", 0) else "")
         + (r", \sin\phi_t, \cos\phi_t" if model.effective_season > 1 else "")
         + r"\right] \in \mathbb{R}^{" + str(n_in) + "}"),
        enc,
        *_pooling(L, d),
        (r"\hat{y}_{L+h}", ref + r" + w \, s_\Delta \left[\mathbf{W}_2 \, \mathrm{GELU}\left("
         r"\mathbf{W}_1 [\mathbf{c}; \mathbf{h}_L" + (r"; \mathbf{u}" if n_fut else "")
         + r"] + \mathbf{b}_1\right) + \mathbf{b}_2"
         r"\right]_h, \quad h = 1, \ldots, " + str(H)),
    ]
    if model.pool == "mean":                      # the ablation: uniform weights
        lines[2:4] = [(r"\alpha_t", r"\frac{1}{" + str(L) + r"}, \quad \mathbf{v}_t = "
                       r"\mathbf{h}_t")]
    where = [
        (r"y_1, \ldots, y_{" + str(L) + "}", f"the last {L} observations (lookback)"),
        (r"\mu, \sigma", "mean and standard deviation of the training series"),
        (r"s_\Delta", "standard deviation, over the training windows, of the targets' "
         "change from the base forecast"),
        ("w", "weight of the network's correction in [0, 1], chosen by least squares on "
         "the validation windows and shrunk by its standard error"
         + (f" (fitted: \\(w = {model.shrink_:.2f}\\)"
            + ("; the forecast is the base alone)" if model.shrink_ == 0 else ")")
            if hasattr(model, "shrink_") else "")),
        (r"\mathbf{W}_q, \mathbf{W}_k \in \mathbb{R}^{" + f"{d} \\times {d}" + "}",
         "query and key projections"),
        (r"\mathbf{W}_1 \in \mathbb{R}^{" + f"{d} \\times {2 * d}" + r"}, \mathbf{W}_2 "
         r"\in \mathbb{R}^{" + f"{H} \\times {d}" + "}", "output layer"),
        (r"\mathbf{b}_q, \mathbf{b}_k, \mathbf{b}_1, \mathbf{b}_2", "bias vectors of the "
         "query and key projections and of the output layer"),
    ]
    if ref == r"\hat{y}^{\mathrm{base}}_{L+h}":
        what = {"ets": "Holt-Winters ETS (additive damped trend"
                       + (", additive season" if m > 1 else "") + ")",
                "ar": "an AutoReg model with a constant, order by AIC (on first "
                      "differences when the levels have a unit root)",
                "arima": "an ARIMA model (differencing by an ADF test, orders by AIC)",
                "theta": "the Theta method (SES with half the linear trend)",
                "drift": "the random walk with drift",
                "combination": "the median of ETS, ARIMA and Theta"}.get(
            base, "the candidate base with the lowest error over rolling origins at the "
                  "end of the training series")
        where.append((r"\hat{y}^{\mathrm{base}}_{L+h}", f"the h-step forecast of {what}, "
                      "fitted on the training series (the base the network corrects)"))
    if n_fut:
        where.append((r"\mathbf{u}", f"the {n_fut} known-future column(s) at the {H} "
                      "forecast steps, standardized with their training mean and standard "
                      f"deviation and flattened ({H * n_fut} values)"))
    if getattr(model, "n_exog_", 0):
        where.append((r"\mathbf{z}_t", f"the {model.n_exog_} exogenous (past covariate) "
                      "column(s) at step t, standardized with their training mean and "
                      "standard deviation"))
    if model.effective_season > 1:
        m = model.effective_season
        where.append((r"\phi_t", f"\\(\\phi_t = 2\\pi (t \\bmod {m}) / {m}\\), the "
                      "phase within the season"))
    if model.encoder == "transformer":
        where.append((r"\mathbf{X}, \mathbf{W}_{\mathrm{in}}", f"the {L} x {n_in} matrix "
                      r"whose rows are the \(\mathbf{x}_t\), and the input projection to "
                      f"size {d}"))
        where.append((r"\mathbf{P}", "sinusoidal positions (Vaswani et al. 2017); "
                      f"Encoder: {model.num_layers} pre-LN layer(s), {model.nhead} heads"))
    return Equations(f"AttentionForecaster ({model.encoder} encoder)", lines, where)


def _transformer_encoder(layers: int, L: int, d: int) -> tuple[str, str]:
    """The line of a Transformer encoder over the window: ``H = Encoder(X W_in + P)``."""
    return (r"\mathbf{H} = \left[\mathbf{h}_1; \ldots; \mathbf{h}_L\right]",
            r"\mathrm{Encoder}_{" + str(layers) + r"}\left("
            r"\mathbf{X} \mathbf{W}_{\mathrm{in}} + \mathbf{P}\right) \in \mathbb{R}^{"
            f"{L} \\times {d}}}")


def global_equations(model) -> Equations:
    """The equations of a :class:`~attnlab.models.forecast.GlobalForecaster`: one network for
    every series, each series' base and scale its own (fitted or not)."""
    L, H, d = model.effective_lookback, model.horizon, model.hidden_size
    if model.encoder == "transformer":
        enc = _transformer_encoder(model.num_layers, L, d)
    else:
        enc = (r"\mathbf{h}_t", r"\mathrm{" + model.encoder.upper() + r"}\left(x_t, "
               r"\mathbf{h}_{t-1}\right) \in \mathbb{R}^{" + str(d) + r"}, \quad t = 1, "
               r"\ldots, " + str(L))
    lines = [
        ("x_t", r"\frac{y_t - y_L}{s}, \quad t = 1, \ldots, " + str(L)),
        (r"\mathbf{f}", r"\left[\frac{\hat{y}^{\mathrm{base}}_{L+h} - y_L}{s}\right]_{h=1}^{"
         + str(H) + r"} \in \mathbb{R}^{" + str(H) + "}"),
        enc,
        *_pooling(L, d),
        (r"\hat{y}_{L+h}", r"\hat{y}^{\mathrm{base}}_{L+h} + w \, s \left[\mathbf{W}_2 \, "
         r"\mathrm{GELU}\left(\mathbf{W}_1 [\mathbf{c}; \mathbf{h}_L; \mathbf{f}] + "
         r"\mathbf{b}_1\right) + \mathbf{b}_2\right]_h, \quad h = 1, \ldots, " + str(H)),
    ]
    if model.pool == "mean":
        lines[3:5] = [(r"\alpha_t", r"\frac{1}{" + str(L) + r"}, \quad \mathbf{v}_t = "
                       r"\mathbf{h}_t")]
    n = len(getattr(model, "series_", ()))
    where = [
        (r"y_1, \ldots, y_{" + str(L) + "}", f"the last {L} observations of one series"),
        ("s", "the series' scale: the in-sample mean absolute seasonal difference (MASE's "
              "denominator)"),
        (r"\hat{y}^{\mathrm{base}}_{L+h}", f"the h-step forecast of the series' own base ("
         f"{model.base}), fitted on that series alone"),
        ("w", "weight of the network's correction in [0, 1], chosen on the calibration "
              "series' held-out windows"
         + (f" (fitted: \\(w = {model.shrink_:.2f}\\))" if hasattr(model, "shrink_") else "")),
        (r"\mathbf{W}_q, \mathbf{W}_k \in \mathbb{R}^{" + f"{d} \\times {d}" + "}",
         "query and key projections, shared by every series"
         + (f" ({n} in this fit)" if n else "")),
        (r"\mathbf{W}_1 \in \mathbb{R}^{" + f"{d} \\times {2 * d + H}" + r"}, \mathbf{W}_2 "
         r"\in \mathbb{R}^{" + f"{H} \\times {d}" + "}", "output layer"),
        (r"\mathbf{b}_q, \mathbf{b}_k, \mathbf{b}_1, \mathbf{b}_2", "bias vectors of the "
         "query and key projections and of the output layer"),
    ]
    if model.encoder == "transformer":
        where.append((r"\mathbf{X}, \mathbf{W}_{\mathrm{in}}", f"the {L} x 1 matrix of the "
                      r"\(x_t\), and the input projection to size " + str(d)))
        where.append((r"\mathbf{P}", "sinusoidal positions (Vaswani et al. 2017); "
                      f"Encoder: {model.num_layers} pre-LN layer(s), {model.nhead} heads"))
    return Equations(f"GlobalForecaster ({model.encoder} encoder)", lines, where)
