"""Figures of ``attnlab bench``: time and memory against N per group, and the error of the
approximations against their budget and their time."""

from __future__ import annotations

from pathlib import Path

TITLES = {"window": "sliding window ±{w}", "causal": "causal", "full": "no mask (approximations)"}


def draw_versus_n(result: dict, key: str, axes):
    """``key`` (``time_s`` or ``peak_mib``) against N into ``axes``, one panel per group; solid:
    forward, dashed: forward and backward."""
    from attnlab.bench import GROUPS

    label = {"time_s": "seconds", "peak_mib": "extra peak MiB"}[key]
    cells = [c for c in result["cells"] if "time_s" in c]
    for ax, (group, methods) in zip(axes, GROUPS.items()):
        for m in methods:
            for mode, style in (("fwd", "-"), ("fwd+bwd", "--")):
                pts = sorted((c["n"], c[key]) for c in cells if c["group"] == group
                             and c["method"] == m and c["mode"] == mode)
                if pts:
                    ax.plot(*zip(*pts), style, marker="o", label=f"{m} {mode}")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("N (sequence length)")
        ax.set_ylabel(label)
        ax.set_title(TITLES[group].format(w=result["window"][0]))
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    axes[0].figure.suptitle(f"{label} vs N (B=1, H=8, D=64, fp32); solid: forward, dashed: "
                            "fwd+bwd")
    return axes


def draw_tradeoff(result: dict, axes):
    """The approximations' error against their budget and against their time into
    ``axes = (ax1, ax2)``."""
    ax1, ax2 = axes
    for name in dict.fromkeys(r["method"] for r in result["tradeoff"]):
        pts = [r for r in result["tradeoff"] if r["method"] == name]
        ax1.plot([r["budget"] for r in pts], [r["rel"] for r in pts], marker="o", label=name)
        ax2.plot([r["time_s"] for r in pts], [r["rel"] for r in pts], marker="o", label=name)
    for ax in (ax1, ax2):
        ax.set_yscale("log")
        ax.set_ylabel("relative error vs exact attention")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    ax1.set_xscale("log", base=2)
    ax1.set_xlabel("budget: random features (performer), rank (linformer), chunk (lsh)")
    ax2.set_xscale("log")
    ax2.set_xlabel("forward time, s (N=1024, B=1, H=8, D=64)")
    ax1.figure.suptitle("approximations: error against budget and against time (N=1024)")
    return axes


def save_bench(result: dict, out_dir: Path) -> list[Path]:
    """time_vs_n.png, memory_vs_n.png and error_tradeoff.png from a bench result."""
    from attnlab.plots._figure import figure

    out_dir = Path(out_dir)
    paths = []
    for key, name in (("time_s", "time"), ("peak_mib", "memory")):
        path = out_dir / f"{name}_vs_n.png"
        with figure(path, figsize=(15, 4.5), dpi=110) as fig:
            draw_versus_n(result, key, fig.subplots(1, 3))
        paths.append(path)
    path = out_dir / "error_tradeoff.png"
    with figure(path, figsize=(12, 4.5), dpi=110) as fig:
        draw_tradeoff(result, fig.subplots(1, 2))
    paths.append(path)
    return paths
