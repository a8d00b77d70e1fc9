"""Run health (issue 28): every run judged as its metrics and samples arrive, on the server.

- `thresholds.py`: every threshold, documented (served with each report);
- `metric_checks.py`, `sample_checks.py`, `stall.py`: the checks, small functions of (their state, the new
  points or answers) -> judgements per step;
- `tracker.py`: judgements -> fire / clear transitions (consecutive bad / good steps);
- `store.py`: the per-run state and alarm rows, the hooks the ingest services call, the report and its events;
- `autostop.py`: the launch-time rule (`trainer.health.stop_on`, `stop_after_steps`) that cancels a sick run.
"""
from backend.services.health.store import (
    apply,
    close_ended,
    discard,
    judge_metrics,
    judge_samples,
    no_signal_prompts,
    on_heartbeat,
    on_metrics,
    refresh_stalled,
    release,
    report,
    summaries,
)

__all__ = ["apply", "close_ended", "discard", "judge_metrics", "judge_samples", "no_signal_prompts", "on_heartbeat", "on_metrics",
           "refresh_stalled", "release", "report", "summaries"]
