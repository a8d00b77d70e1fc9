"""Console logger: one readable line per step and a tqdm progress bar with ETA."""
from __future__ import annotations

import math
import re
import sys

from tqdm import tqdm

from engine import metric_names
from engine.loggers.base import Logger

# KL to the reference policy: the KL loss in the actor's objective, else the KL penalty in the reward.
# Never `actor/ppo_kl` (old vs new policy within one update: 0 by construction on-policy), which is a
# different quantity from the one the seed's "KL 0.01-0.1 is healthy" speaks of.
KL_KEYS = (metric_names.KL_LOSS, metric_names.KL_IN_REWARD)
KL_NONE = "KL: none (no reference)"

# (label, candidate metric keys in order of preference)
COLUMNS = [
    ("Score", (metric_names.SCORE,)),
    ("Actor Loss", ("actor/pg_loss",)),
    ("Critic Loss", ("critic/vf_loss",)),
    ("KL", KL_KEYS),
    ("Resp Len", (metric_names.RESPONSE_LENGTH,)),
    ("Step Time", ("timing_s/step",)),
]


def _fmt(value: float) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "nan"
    if abs(value) >= 100 or value == int(value):
        return f"{value:.1f}"
    return f"{value:.4f}" if abs(value) < 1 else f"{value:.3f}"


# val-core/<data_source>/<var>/<stat>; a data source may itself contain '/' (openai/gsm8k)
VAL_CORE = re.compile(r"^val-core/(?P<src>.+)/(?P<var>[^/]+)/(?:mean@(?P<n>\d+)|(?P<kind>best|maj)@(?P<k>\d+)/mean)$")


def _val_label(key: str) -> str | None:
    """`arith val@4` (the mean of the reward), `arith acc@4` (another core variable), `arith best@4`,
    `arith maj@4`; None for keys the line leaves out (std, val-aux)."""
    m = VAL_CORE.match(key)
    if m is None:
        return None
    if m["n"] is not None:
        return f"{m['src']} {'val' if m['var'] == 'reward' else m['var']}@{m['n']}"
    return f"{m['src']} {m['kind']}@{m['k']}"


def format_step_line(step: int, metrics: dict[str, float]) -> str:
    parts = [f"Epoch {int(metrics.get('training/epoch', 0)) + 1}", f"Step {step}"]
    training_step = "actor/pg_loss" in metrics  # a validation-only line (step 0) has no update to speak of
    for label, keys in COLUMNS:
        for key in keys:
            if key in metrics:
                unit = "s" if label == "Step Time" else ""
                parts.append(f"{label}: {_fmt(metrics[key])}{unit}")
                break
        else:
            if label == "KL" and training_step:
                parts.append(KL_NONE)
    val = [f"{label}: {_fmt(v)}" for k, v in metrics.items() if (label := _val_label(k))]
    # an update skipped for a non-finite gradient norm (weights left unchanged) must not pass unnoticed
    skipped = [k.split("/")[0] for k, v in metrics.items() if k.endswith("/grad_norm_nonfinite") and v and v > 0]
    warn = [f"UPDATE SKIPPED ({', '.join(sorted(skipped))}: non-finite grad norm)"] if skipped else []
    return " | ".join(parts + val + warn)


class ConsoleLogger(Logger):
    def __init__(self, total_steps: int | None = None, stream=None, progress: bool = True):
        self.stream = stream or sys.stdout
        self.bar = tqdm(total=total_steps, desc="training", unit="step", dynamic_ncols=True,
                        file=sys.stderr, disable=not progress, leave=False)

    def log_metrics(self, step: int, metrics: dict[str, float]) -> None:
        line = format_step_line(step, metrics)
        if self.bar.disable:
            print(line, file=self.stream, flush=True)
        else:
            self.bar.write(line, file=self.stream)
            self.bar.n = step
            self.bar.refresh()

    def log_status(self, status: str, **fields) -> None:
        extra = " ".join(f"{k}={v}" for k, v in fields.items() if v is not None)
        print(f"[rlstudio] {status}{(' ' + extra) if extra else ''}", file=self.stream, flush=True)

    def close(self) -> None:
        self.bar.close()
