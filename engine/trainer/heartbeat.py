"""The driver's heartbeat: which phase of the loop it is in, reported to the loggers when it enters one.

A run that stops logging steps is either slow or hung; the phase it is in, and since when, tells the two apart
(the server compares the time in the phase with that phase's usual `timing_s/<phase>`). One report per phase
change, none while a phase runs, so the cost is a few small messages per step whatever the step's length.

Phases (their names are the `timing_s/<name>` keys where one exists): `load_checkpoint` (resume), `gen`,
`gen_max` (REMAX's greedy baseline), `reward`, `old_log_prob`, `ref`, `values`, `adv`, `update_critic`,
`update_actor`, `sync_weights` (vLLM: the actor's weights streamed into the rollout engine, and checked),
`validation`, `save_checkpoint`, `save_checkpoint_wait` (waiting for a background write),
`export_hf_model`, `wait_rollout` (the async modes: the trainer waiting for the rollout thread's batch, inside `gen`;
its `detail` names what the producer is doing). A logger that has `log_phase(phase, step)` receives them (engine/loggers/base.py); the dashboard
logger sends them to the server (engine/loggers/dashboard.py).
"""
from __future__ import annotations

from engine.loggers.base import Logger, report_phase


class Heartbeat:
    def __init__(self, logger: Logger):
        self.logger = logger
        self.current: tuple[str, int] | None = None

    def enter(self, phase: str, step: int, detail: str | None = None) -> None:
        """Report `phase` of step `step`, unless it is the phase already reported. `detail`: one line on what the
        phase waits for, passed to a logger whose log_phase takes a `detail` argument."""
        if (phase, step) == self.current:
            return
        self.current = (phase, step)
        report_phase(self.logger, phase, step, detail)
