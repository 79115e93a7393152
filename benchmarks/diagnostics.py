"""The experiments of docs/diagnostics.md, full size, with their figures and numbers.

    python benchmarks/diagnostics.py                      # about 12 minutes on 2 cores
    python benchmarks/diagnostics.py --out /tmp/diag      # figures and results.json there

Also measures the training monitor's overhead (time per step with and without it at its
default interval) and the peak memory of head_health at N = 16384 against the N x N matrix.
"""

from __future__ import annotations

import argparse
import json
import resource
import time
from pathlib import Path

import torch

from attnlab.diagnose import experiments as E
from attnlab.plots import diagnose as P


def monitor_overhead(steps: int = 200, every: int = 50) -> dict:
    """A forecaster-sized model (attnlab Encoder, d 64, 2 layers, 48 steps of history, batch 64)
    trained with and without an AttentionMonitor at its default interval."""
    from attnlab.diagnose import AttentionMonitor
    from attnlab.nn import Encoder, EncoderLayer

    def run(monitored: bool) -> float:
        torch.manual_seed(0)
        model = Encoder(EncoderLayer(64, 4, 128, dropout=0.0, batch_first=True), 2)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        mon = AttentionMonitor(model, every=every) if monitored else None
        x, y = torch.randn(64, 48, 64), torch.randn(64, 48, 64)
        t = time.perf_counter()
        for step in range(steps):
            if mon is None:
                loss = (model(x) - y).square().mean()
            else:
                with mon.step(step):
                    loss = (model(x) - y).square().mean()
            opt.zero_grad()
            loss.backward()
            if mon is not None:
                mon.after_backward()
            opt.step()
        return (time.perf_counter() - t) / steps
    plain = min(run(False) for _ in range(3))
    watched = min(run(True) for _ in range(3))
    return {"every": every, "step_s": plain, "monitored_step_s": watched,
            "overhead": watched / plain - 1}


def stats_memory(n: int = 16384) -> dict:
    from attnlab.diagnose import head_health
    q = torch.randn(1, 1, n, 64)
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    t = time.perf_counter()
    head_health(q, q, causal=True)
    return {"n": n, "seconds": time.perf_counter() - t,
            "peak_above_before_mb":
                resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 - base,
            "dense_float64_mb": n * n * 8 / 2**20}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default="docs/img", help="folder for the figures")
    p.add_argument("--json", default=None, help="write every number here")
    args = p.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    res: dict = {"memory": stats_memory()}          # first: the process is still small
    print("head_health at N = 16384:", res["memory"], flush=True)
    res["scale"] = E.scale_sweep()
    res["no_scale"] = E.no_scale_regime()
    for r in res["no_scale"]["rows"]:
        print(f"no scale: lr {r['lr']:g} seed {r['seed']} {r['scale']:8s} final loss "
              f"{r['final_loss']:.3f}, largest logit {r['max_logit']:.0f}", flush=True)
    pick = {r["scale"]: r for r in res["no_scale"]["rows"] if r["lr"] == 3e-3 and r["seed"] == 0}
    curves = {"d_k": res["no_scale"]["d_k"], **{k: {"loss": v["loss"]} for k, v in pick.items()}}
    P.save_why_sqrt_d(res["scale"], curves, out / "diagnostics_why_sqrt_d.png")
    print("scale sweep:", json.dumps(res["scale"]), flush=True)
    res["temperature"] = E.temperature_sweep()
    P.save_temperature(res["temperature"], out / "diagnostics_temperature.png")
    for r in res["temperature"]["rows"]:
        print("temperature:", r, flush=True)
    res["logit_growth"] = E.logit_growth()
    P.save_logit_growth(res["logit_growth"], out / "diagnostics_logit_growth.png")
    for r in res["logit_growth"]["rows"]:
        print("logit growth:", r, flush=True)
    res["ln_depth"] = E.ln_depth()
    P.save_ln_depth(res["ln_depth"], out / "diagnostics_ln_depth.png")
    for tag in ("post", "pre"):
        for depth, norms in res["ln_depth"][tag].items():
            print(f"{tag}-LN {depth} layers: W2 gradient first {norms[0]:.3f}, last "
                  f"{norms[-1]:.3f}, max {max(norms):.3f}", flush=True)
    res["ln_training"] = E.ln_training()
    P.save_ln_training(res["ln_training"], out / "diagnostics_ln_training.png")
    for r in res["ln_training"]["rows"]:
        print(f"LN training: {r['norm']}-LN warm-up {r['warmup']} seed {r['seed']}: final loss "
              f"{r['final_loss']:.3f}", flush=True)
    res["monitor"] = monitor_overhead()
    print("monitor overhead:", res["monitor"], flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=1, default=str))


if __name__ == "__main__":
    main()
