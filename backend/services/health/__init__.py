"""Run health (issue 28): every run judged as its metrics and samples arrive, on the server.

- `thresholds.py`: every threshold, documented (served with each report);
- `metric_checks.py`, `sample_checks.py`, `stall.py`: the checks, small functions of (their state, the new
  points or answers) -> judgements per step;
- `tracker.py`: judgements -> fire / clear transitions (consecutive bad / good steps);
- `state.py`: a run's cached state row and its judge lock (the one place health keeps anything);
- `judge.py`: a batch and the state -> judgements and the trackers' changes, without the database;
- `alarms.py`: the changes written: alarm rows, per-prompt record, events, webhooks, auto-stop;
- `hooks.py`: what the ingest services call (judge before the write lock, apply in it, release after);
- `report.py`: the read side: the report, the runs list's summaries, the no-signal prompts;
- `autostop.py`: the launch-time rule (`trainer.health.stop_on`, `stop_after_steps`) that cancels a sick run.
"""
from backend.services.health.hooks import (
    apply,
    close_ended,
    discard,
    judge_metrics,
    judge_samples,
    on_heartbeat,
    on_metrics,
    refresh_stalled,
    release,
)
from backend.services.health.report import no_signal_prompts, report, summaries
from backend.services.health.state import HEALTH_CHECKS, STOP_JOB

__all__ = ["HEALTH_CHECKS", "STOP_JOB", "apply", "close_ended", "discard", "judge_metrics", "judge_samples",
           "no_signal_prompts", "on_heartbeat", "on_metrics", "refresh_stalled", "release", "report", "summaries"]
