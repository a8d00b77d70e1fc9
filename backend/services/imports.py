"""Importing a run made elsewhere (verl's file logger and generation dumps, TensorBoard event files): the readers
in `backend/imports/` parse, this stores. Points and answers go through the same ingest as a live run's (upserts,
buckets, health checks, the live feed), in batches, so memory stays at one batch whatever the file's size.

All or nothing: every file is read through once before anything is stored (a line at a time, nothing kept), so a
bad line (BadFile) is refused with nothing written, not even a feed event; the files are then read again and
stored. A failure while storing (the database, the disk) deletes the run and what it stored so far (and its
experiment when the import made it), so a failed import leaves no half run. An import cut short (the
server or the command killed mid-way) leaves its run `running` with source `import`; the next server start marks
it failed, saying so (`mark_interrupted`)."""
from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from pydantic import ValidationError
from sqlmodel import Session, select

from backend.imports.errors import BadFile
from backend.imports.hydra_config import read_config
from backend.imports.tensorboard_events import read_scalars
from backend.imports.verl_generations import read_samples
from backend.imports.verl_metrics import Skipped, read_steps
from backend.models import Experiment, MetricSeriesIn, MetricsIngest, Run, RunStatus, SampleIn
from backend.models.common import clean_json
from backend.services import experiments, metrics, runs, samples

SOURCE = "import"  # run.source of an imported run
POINTS_PER_BATCH = 5_000  # under RLSTUDIO_MAX_METRIC_POINTS_PER_REQUEST's default, as a live run's batches are
SAMPLES_PER_BATCH = 256


@dataclass
class Upload:
    """One file: the name it is reported under and its bytes (read once, front to back)."""

    name: str
    stream: IO[bytes]


@dataclass
class VerlFiles:
    metrics: Upload
    config: Upload | None = None
    rollout: list[Upload] = field(default_factory=list)  # trainer.rollout_data_dir's <step>.jsonl
    validation: list[Upload] = field(default_factory=list)  # trainer.validation_data_dir's


@dataclass
class Target:
    """Where the run goes: its experiment (by name, made when new), its name, tags and notes."""

    experiment: str = "imported"
    name: str = ""
    tags: list[str] = field(default_factory=list)
    notes: str = ""


@dataclass
class Summary:
    points: int = 0
    steps: int = 0
    lines: int = 0
    samples: dict[str, int] = field(default_factory=dict)  # by split
    last_step: int | None = None
    skipped: dict[str, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


class _MetricBatches:
    """Points gathered into columnar batches (one series per key) and sent through metrics.ingest."""

    def __init__(self, session: Session, run: Run, summary: Summary):
        self.session, self.run, self.summary = session, run, summary
        self.series: dict[str, tuple[list[int], list[float], list[float]]] = {}
        self.size = 0

    def add(self, key: str, step: int, value: float, wall_time: float) -> None:
        steps, values, walls = self.series.setdefault(key, ([], [], []))
        steps.append(step)
        values.append(value)
        walls.append(wall_time)
        self.size += 1
        if self.size >= POINTS_PER_BATCH:
            self.flush()

    def flush(self) -> None:
        if not self.size:
            return
        body = MetricsIngest(series=[MetricSeriesIn(key=key, steps=s, values=v, wall_times=w)
                                     for key, (s, v, w) in self.series.items()])
        self.summary.points += metrics.ingest(session=self.session, run=self.run, body=body)
        self.series, self.size = {}, 0


def _new_run(session: Session, runs_dir: Path, target: Target, config: dict, facts: dict) -> tuple[Run, bool]:
    """The run, `running` while it fills; and whether its experiment is new (a failed import removes it too)."""
    new_experiment = experiments.by_name(session=session, name=target.experiment) is None
    experiment = experiments.get_or_create(session=session, name=target.experiment)
    run = Run(experiment_id=experiment.id, name=target.name, config=config, resolved_config=config,
              tags=target.tags, notes=target.notes, source=SOURCE, facts=facts)
    session.add(run)
    session.flush()
    if not run.name:
        run.name = f"imported-{run.id}"
    directory = runs_dir / str(run.id)
    directory.mkdir(parents=True, exist_ok=True)
    run.run_dir = str(directory)
    runs.set_status(session, run, RunStatus.running)
    session.commit()
    return run, new_experiment


def _store(session: Session, runs_dir: Path, target: Target, config: dict, facts: dict, fill) -> tuple[Run, Summary]:
    """Make the run, let `fill(run, summary)` store its points and answers, finish it; on any failure delete the
    run and what it stored, and raise."""
    run, new_experiment = _new_run(session, runs_dir, target, config, facts)
    summary = Summary()
    try:
        fill(run, summary)
        run.facts = {**run.facts, "import": {**run.facts.get("import", {}), **_facts_of(summary)}}
        total = (config.get("trainer") or {}).get("total_training_steps") if isinstance(config, dict) else None
        runs.update_progress(run, summary.last_step, total if isinstance(total, int) and total > 0 else None)
        run.eta_seconds = None
        runs.set_status(session, run, RunStatus.succeeded)
        session.commit()
    except BaseException:
        session.rollback()
        fresh = session.get(Run, run.id)
        if fresh is not None:
            runs.delete_run(session, fresh, runs_dir)
        experiment = session.get(Experiment, run.experiment_id) if new_experiment else None
        if experiment is not None and not session.exec(select(Run.id).where(Run.experiment_id == experiment.id)).first():
            session.delete(experiment)
            session.commit()
        raise
    return run, summary


def _facts_of(summary: Summary) -> dict[str, Any]:
    out: dict[str, Any] = {"points": summary.points, "steps": summary.steps, "samples": summary.samples}
    if summary.skipped:
        out["skipped_values"] = dict(list(summary.skipped.items())[:50])
    if summary.notes:
        out["notes"] = summary.notes
    return out


def _sample_batches(session: Session, run: Run, uploads: Iterable[Upload], split: str, field_name: str,
                    summary: Summary) -> None:
    batch: list[SampleIn] = []

    def flush() -> None:
        if batch:
            summary.samples[split] = summary.samples.get(split, 0) + samples.ingest(session=session, run=run,
                                                                                     samples=batch)
            batch.clear()

    for upload in uploads:
        for line, row in read_samples(upload.stream, upload.name, split, field_name):
            batch.append(_sample(row, upload.name, line, field_name))
            if len(batch) >= SAMPLES_PER_BATCH:
                flush()
    flush()


def check_verl(files: VerlFiles) -> None:
    """Read every file through, storing nothing: BadFile for the first line that is not verl's; then rewind."""
    skipped = Skipped()
    if not sum(1 for _ in read_steps(files.metrics.stream, files.metrics.name, skipped)):  # every line
        raise BadFile(files.metrics.name, "no lines: an empty file (verl's file logger writes one line per step)",
                      field="metrics")
    for uploads, split, field_name in ((files.rollout, "train", "rollout"), (files.validation, "val", "validation")):
        for upload in uploads:
            for line, row in read_samples(upload.stream, upload.name, split, field_name):
                _sample(row, upload.name, line, field_name)
    for upload in [files.metrics, *files.rollout, *files.validation]:
        upload.stream.seek(0)


def _sample(row: dict, file: str, line: int, field_name: str) -> SampleIn:
    try:
        return SampleIn.model_validate(row)
    except ValidationError as exc:
        error = exc.errors()[0]
        where = ".".join(str(p) for p in error["loc"])
        raise BadFile(file, f"{where}: {error['msg']}", line=line, field=field_name) from None


def import_verl(*, session: Session, runs_dir: Path, files: VerlFiles, target: Target) -> tuple[Run, Summary]:
    """A verl run from its file-logger JSONL, and its config and generation dumps when given."""
    config, note = ({}, None) if files.config is None else read_config(files.config.stream, files.config.name)
    check_verl(files)
    facts = {"import": {"format": "verl", "metrics_file": files.metrics.name,
                        "config_file": files.config.name if files.config else None,
                        "rollout_files": len(files.rollout), "validation_files": len(files.validation)}}
    if not target.name:
        trainer = config.get("trainer") if isinstance(config.get("trainer"), dict) else {}
        target.name = str(trainer.get("experiment_name") or "")[:200] or Path(files.metrics.name).stem[:200]

    def fill(run: Run, summary: Summary) -> None:
        if note:
            summary.notes.append(f"config: {note}")
        skipped = Skipped()
        batches = _MetricBatches(session, run, summary)
        start = time.time()
        steps: set[int] = set()
        for line in read_steps(files.metrics.stream, files.metrics.name, skipped):
            summary.lines += 1
            steps.add(line.step)
            wall = start + line.elapsed if line.elapsed is not None else time.time()
            for key, value in line.values.items():
                batches.add(key, line.step, value, wall)
            summary.last_step = line.step if summary.last_step is None else max(summary.last_step, line.step)
        batches.flush()
        if not summary.lines:
            raise BadFile(files.metrics.name, "no lines: an empty file (verl's file logger writes one line per "
                                              "step)", field="metrics")
        summary.steps = len(steps)
        summary.skipped = skipped.keys
        _sample_batches(session, run, files.rollout, "train", "rollout", summary)
        _sample_batches(session, run, files.validation, "val", "validation", summary)

    return _store(session, runs_dir, target, clean_json(config), facts, fill)


def import_tensorboard(*, session: Session, runs_dir: Path, files: list[tuple[str, Path]], target: Target
                       ) -> tuple[Run, Summary]:
    """A run from TensorBoard event files (name, path on disk: TensorBoard's loader reads paths)."""
    if not files:
        raise BadFile("events", "no event files given", field="events")
    other: dict[str, int] = {}
    for name, path in files:  # read through first: a bad file is refused with nothing stored
        for _ in read_scalars(path, name, other):
            pass
    facts = {"import": {"format": "tensorboard", "event_files": [name for name, _ in files][:100]}}
    if not target.name:
        target.name = Path(files[0][1]).parent.name[:200] if len(files) > 1 else Path(files[0][0]).name[:200]

    def fill(run: Run, summary: Summary) -> None:
        other: dict[str, int] = {}
        batches = _MetricBatches(session, run, summary)
        steps: set[int] = set()
        for name, path in files:
            for point in read_scalars(path, name, other):
                batches.add(point.key, point.step, point.value, point.wall_time)
                steps.add(point.step)
                summary.last_step = point.step if summary.last_step is None else max(summary.last_step, point.step)
        batches.flush()
        summary.steps = len(steps)
        summary.skipped = {f"({plugin} summaries)": n for plugin, n in other.items()}

    return _store(session, runs_dir, target, {}, facts, fill)


def interrupted(session: Session) -> Iterator[Run]:
    yield from session.exec(select(Run).where(Run.source == SOURCE, Run.status == RunStatus.running)).all()


def mark_interrupted(session: Session) -> int:
    """At the server's start: imports that were cut short (still `running`) become `failed`, saying why."""
    count = 0
    for run in interrupted(session):
        runs.set_status(session, run, RunStatus.failed, error=(
            "The import stopped before it finished (the server or the import command was stopped): its points and "
            "answers are incomplete. Delete this run and import the files again."))
        count += 1
    if count:
        session.commit()
    return count
