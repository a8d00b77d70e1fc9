"""Samples (one per rollout): idempotent batch ingest and the queries behind the samples views."""
from __future__ import annotations

import io
import json
import math
import re
import time
from dataclasses import dataclass

from sqlalchemy import func, literal_column, or_
from sqlmodel import Session, select

from backend.models import Run, Sample, SampleAnswer, SampleIn, SampleRow, SampleStep, StepOverlap, StepOverlaps
from backend.models.trajectory import summary
from backend.services import health
from backend.services.events import add_event, run_channel

FIELDS = [name for name in SampleIn.model_fields]
DERIVED = ["num_turns", "tool_names", "tool_error"]
NO_TURNS = summary(None)
TRAJECTORY = {"turns", "loss_mask"}


@dataclass(frozen=True)
class TurnFilters:
    """Multi-turn filters: turns (the prompt counts as one), a tool called, any tool error. Single-turn answers
    have no turns: a turn filter leaves them out, `tool_error=False` and `uses_tool=False` keep them."""

    num_turns: int | None = None
    min_turns: int | None = None
    max_turns: int | None = None
    tool: str | None = None
    uses_tool: bool | None = None
    tool_error: bool | None = None

    def apply(self, stmt):
        if self.num_turns is not None:
            stmt = stmt.where(Sample.num_turns == self.num_turns)
        if self.min_turns is not None:
            stmt = stmt.where(Sample.num_turns >= self.min_turns)
        if self.max_turns is not None:
            stmt = stmt.where(Sample.num_turns <= self.max_turns)
        if self.tool is not None:
            stmt = stmt.where(Sample.tool_names.contains(f"|{self.tool}|"))
        if self.uses_tool is not None:
            stmt = stmt.where(Sample.tool_names.is_not(None) if self.uses_tool else Sample.tool_names.is_(None))
        if self.tool_error is not None:
            stmt = stmt.where(Sample.tool_error.is_(True) if self.tool_error
                              else or_(Sample.tool_error.is_(None), Sample.tool_error.is_(False)))
        return stmt


@dataclass(frozen=True)
class VersionFilters:
    """Asynchronous runs: answers by verl's staleness ((step - 1) - newest policy version). `stale=True` keeps
    those over 0; `stale=False` the on-policy ones and those that recorded no versions (a synchronous run's);
    `min_staleness` those at least that stale."""

    stale: bool | None = None
    min_staleness: int | None = None

    def apply(self, stmt):
        if self.stale is not None:
            stmt = stmt.where(Sample.staleness > 0 if self.stale
                              else or_(Sample.staleness.is_(None), Sample.staleness <= 0))
        if self.min_staleness is not None:
            stmt = stmt.where(Sample.staleness >= self.min_staleness)
        return stmt


def ingest(*, session: Session, run: Run, samples: list[SampleIn]) -> int:
    if not samples:
        return 0
    from backend.services.upsert import insert_for

    now = time.time()
    rows: dict[tuple, dict] = {}
    # a batch of single-turn answers leaves the turn columns out of the INSERT (they are NULL, and an upsert
    # sets them from `excluded`, so NULL too): less to bind per row on the common path
    multi_turn = any(s.turns is not None or s.loss_mask is not None for s in samples)
    for s in samples:
        if multi_turn:
            row = s.model_dump()
            row.update(NO_TURNS if s.turns is None else summary(row["turns"]))
        else:
            row = s.model_dump(exclude=TRAJECTORY)
        row.update(run_id=run.id, wall_time=now)
        rows[(s.split, s.step, s.sample_index)] = row
    stmt = insert_for(session, Sample)
    updated = {name: stmt.excluded[name] for name in FIELDS + DERIVED + ["wall_time"]
               if name not in ("split", "step", "sample_index")}
    stmt = stmt.on_conflict_do_update(index_elements=["run_id", "split", "step", "sample_index"], set_=updated)
    judged = health.judge_samples(session, run, samples)  # before the write lock; written inside it
    try:
        _write(session, run, stmt, rows, judged)
    except BaseException:
        health.discard(session, judged)  # never stored: the run's health state goes back to the table's
        raise
    finally:
        health.release(judged)
    return len(rows)


def _write(session: Session, run: Run, stmt, rows: dict, judged) -> None:
    from backend.services.upsert import in_lock_order, write_lock

    with write_lock(session):
        session.execute(stmt, [rows[position] for position in in_lock_order(session, list(rows))])
        by_step: dict[tuple[int, str], int] = {}
        for split, step, _ in rows:
            by_step[(step, split)] = by_step.get((step, split), 0) + 1
        health.apply(session, run, judged)
        add_event(session, run_channel(run.id), "samples", {"batches": [
            {"step": step, "split": split, "count": n} for (step, split), n in sorted(by_step.items())]})
        session.commit()


def steps(*, session: Session, run_id: int) -> list[SampleStep]:
    stmt = (select(Sample.step, Sample.split, func.count(), func.avg(Sample.score))
            .where(Sample.run_id == run_id).group_by(Sample.step, Sample.split).order_by(Sample.step, Sample.split))
    return [SampleStep(step=s, split=sp, count=c, mean_score=m) for s, sp, c, m in session.execute(stmt).all()]


def _filtered(run_id: int, *, steps: list[int] | None = None, split: str | None = None,
              prompt_index: int | None = None, group_uid: str | None = None, data_source: str | None = None,
              text: str | None = None, min_score: float | None = None, max_score: float | None = None,
              turns: TurnFilters | None = None, versions: VersionFilters | None = None):
    stmt = select(Sample).where(Sample.run_id == run_id)
    for filters in (turns, versions):
        if filters is not None:
            stmt = filters.apply(stmt)
    if steps:
        stmt = stmt.where(Sample.step.in_(steps))
    for column, wanted in ((Sample.split, split), (Sample.prompt_index, prompt_index),
                           (Sample.group_uid, group_uid), (Sample.data_source, data_source)):
        if wanted is not None:
            stmt = stmt.where(column == wanted)
    if text:
        # any case, as SQLite's LIKE is (PostgreSQL's LIKE is not)
        stmt = stmt.where(or_(Sample.prompt.icontains(text), Sample.response.icontains(text)))
    if min_score is not None:
        stmt = stmt.where(Sample.score >= min_score)
    if max_score is not None:
        stmt = stmt.where(Sample.score <= max_score)
    return stmt


def list_samples(*, session: Session, run_id: int, step: int | None = None, split: str | None = None,
                 prompt_index: int | None = None, group_uid: str | None = None, data_source: str | None = None,
                 text: str | None = None, min_score: float | None = None, max_score: float | None = None,
                 order: str = "step", skip: int = 0, limit: int = 100,
                 turns: TurnFilters | None = None,
                 versions: VersionFilters | None = None) -> tuple[list[Sample], int]:
    """One page of a run's samples and the number that match. `text`: prompt or response contains;
    `order`: a column, '-' prefix for descending."""
    stmt = _filtered(run_id, steps=None if step is None else [step], split=split, prompt_index=prompt_index,
                     group_uid=group_uid, data_source=data_source, text=text, min_score=min_score,
                     max_score=max_score, turns=turns, versions=versions)
    count = session.exec(select(func.count()).select_from(stmt.subquery())).one()
    column = getattr(Sample, order.removeprefix("-"))
    by = column.desc().nulls_last() if order.startswith("-") else column.asc().nulls_first()  # NULL: the smallest
    stmt = stmt.order_by(by, Sample.sample_index, Sample.id)
    return list(session.exec(stmt.offset(skip).limit(limit)).all()), count


def by_prompt(*, session: Session, run_ids: list[int], prompt_index: int, steps: list[int] | None = None,
              split: str | None = None, skip: int = 0, limit: int = 200) -> tuple[list[Sample], int]:
    """One prompt's answers across runs and steps, ordered by run, step, position."""
    stmt = select(Sample).where(Sample.run_id.in_(run_ids), Sample.prompt_index == prompt_index)
    if steps:
        stmt = stmt.where(Sample.step.in_(steps))
    if split is not None:
        stmt = stmt.where(Sample.split == split)
    count = session.exec(select(func.count()).select_from(stmt.subquery())).one()
    rows = session.exec(stmt.order_by(Sample.run_id, Sample.step, Sample.sample_index).offset(skip).limit(limit)).all()
    return list(rows), count


def newest_answers(*, session: Session, run_ids: list[int], split: str, limit: int) -> list[SampleAnswer]:
    """Each run's answers at its newest step of `split`, without prompts and per-token arrays."""
    out: list[SampleAnswer] = []
    for run_id in dict.fromkeys(run_ids):
        newest = session.exec(select(func.max(Sample.step)).where(Sample.run_id == run_id,
                                                                  Sample.split == split)).one()
        if newest is None:
            continue
        rows = session.execute(select(Sample.id, Sample.step, Sample.sample_index, Sample.response, Sample.tokens,
                                      Sample.score)
                               .where(Sample.run_id == run_id, Sample.split == split, Sample.step == newest)
                               .order_by(Sample.sample_index).limit(limit)).all()
        out.extend(SampleAnswer(id=r[0], run_id=run_id, step=r[1], split=split, sample_index=r[2], response=r[3],
                                tokens=r[4], score=r[5]) for r in rows)
    return out


def _first_line(text: str | None) -> str:
    for line in (text or "").splitlines():
        if line.strip():
            return line.strip()[:200]
    return ""


# The question of a prompt: its last user turn without the chat template's tokens (Qwen's ChatML, the tiny model's
# compact `<|im_start|>Q:` form, Llama 3's); the prompt itself when it has no template. The same rules as the
# UI's frontend/src/lib/question.ts `questionOf` (keep the two in step).
_USER_START = re.compile(r"<\|im_start\|>(?:user\n|Q:)|<\|start_header_id\|>user<\|end_header_id\|>\n*")
_TURN_END = re.compile(r"<\|im_end\|>|<\|eot_id\|>|<\|im_start\|>|<\|start_header_id\|>|<\|endoftext\|>")
_HEADER = re.compile(r"<\|im_start\|>\w*(?:\n|:)?|<\|start_header_id\|>\w*<\|end_header_id\|>")
_SPECIAL = re.compile(r"<\|[a-z_]+\|>")
QUESTION_CHARS = 200


def question_of(prompt: str | None) -> str:
    raw = prompt or ""
    last = None
    for last in _USER_START.finditer(raw):
        pass
    if last is not None:
        rest = raw[last.end():]
        end = _TURN_END.search(rest)
        return (rest[:end.start()] if end else rest).strip()
    if not _SPECIAL.search(raw):
        return raw.strip()
    return " ".join(_SPECIAL.sub(" ", _HEADER.sub(" ", raw)).split())


def _question_line(prompt: str | None, seen: dict[str, str]) -> str:
    """The question on one line (whitespace collapsed), at most QUESTION_CHARS characters; answers to one prompt
    share the work."""
    line = seen.get(prompt or "")
    if line is None:
        line = seen[prompt or ""] = " ".join(question_of(prompt).split())[:QUESTION_CHARS]
    return line


def _mean(values) -> float | None:
    finite = [v for v in values or () if isinstance(v, (int, float)) and math.isfinite(v)]
    return sum(finite) / len(finite) if finite else None


def _max_abs_diff(rollout, actor) -> float | None:
    """The largest |rollout - actor| log-prob gap over the tokens where both are finite numbers."""
    if not isinstance(rollout, list) or not isinstance(actor, list):
        return None
    gaps = [abs(a - b) for a, b in zip(rollout, actor)
            if isinstance(a, (int, float)) and isinstance(b, (int, float)) and math.isfinite(a) and math.isfinite(b)]
    return max(gaps) if gaps else None


def rows(*, session: Session, run_id: int, steps: list[int] | None = None, split: str | None = None,
         data_source: str | None = None, text: str | None = None, min_score: float | None = None,
         max_score: float | None = None, limit: int, turns: TurnFilters | None = None,
         versions: VersionFilters | None = None) -> tuple[list[SampleRow], int]:
    """A run's samples (filtered) as table rows: the prompt's question (not the whole prompt), no per-token
    arrays; the mean advantage, the length and the rollout/actor gap are computed here so the browser never
    downloads the arrays. On SQLite the database reduces the arrays itself (json_each), so 4,096 answers of
    256 tokens are not decoded in Python; only rows that carry rollout log-probs are."""
    stmt = _filtered(run_id, steps=steps, split=split, data_source=data_source, text=text, min_score=min_score,
                     max_score=max_score, turns=turns, versions=versions)
    count = session.exec(select(func.count()).select_from(stmt.subquery())).one()
    head = (Sample.id, Sample.step, Sample.split, Sample.sample_index, Sample.prompt_index, Sample.group_uid,
            Sample.data_source, Sample.score, func.substr(Sample.response, 1, 2000), func.length(Sample.response),
            Sample.num_turns, Sample.tool_names, Sample.tool_error, Sample.prompt)
    tail = (Sample.policy_version_min, Sample.policy_version_max, Sample.staleness)  # the last columns of each row
    order = (Sample.step, Sample.split, Sample.sample_index, Sample.id)
    out: list[SampleRow] = []
    questions: dict[str, str] = {}
    if session.get_bind().dialect.name == "sqlite":
        t = Sample.__tablename__
        reduced = (literal_column(f"(SELECT avg(value) FROM json_each({t}.advantages))"),
                   literal_column(f"json_array_length({t}.tokens)"),
                   literal_column(f"json_type({t}.extras, '$.rollout_log_probs') = 'array'"))
        result = session.execute(stmt.with_only_columns(*head, *reduced, *tail).order_by(*order).limit(limit)).all()
        with_rollout = [r[0] for r in result if r[16]]
        gaps = {}
        for i in range(0, len(with_rollout), 500):
            for sid, extras, actor in session.execute(select(Sample.id, Sample.extras, Sample.old_log_probs)
                                                      .where(Sample.id.in_(with_rollout[i:i + 500]))).all():
                gaps[sid] = _max_abs_diff((extras or {}).get("rollout_log_probs"), actor)
        for r in result:
            out.append(_row(r, advantage=r[14], length=r[15], gap=gaps.get(r[0]), questions=questions))
        return out, count
    result = session.execute(stmt.with_only_columns(*head, Sample.advantages, Sample.tokens, Sample.old_log_probs,
                                                    Sample.extras, *tail).order_by(*order).limit(limit)).all()
    for r in result:
        out.append(_row(r, advantage=_mean(r[14]), length=len(r[15]) if r[15] else None,
                        gap=_max_abs_diff((r[17] or {}).get("rollout_log_probs"), r[16]), questions=questions))
    return out, count


def _row(r, *, advantage, length, gap, questions) -> SampleRow:
    return SampleRow(id=r[0], step=r[1], split=r[2], sample_index=r[3], prompt_index=r[4], group_uid=r[5],
                     data_source=r[6], score=r[7], advantage=advantage,
                     length=length if length else (r[9] or 0), first_line=_first_line(r[8]),
                     question=_question_line(r[13], questions),
                     rollout_diff_max=gap, num_turns=r[10], tools=r[11].strip("|").split("|") if r[11] else None,
                     tool_error=r[12], policy_version_min=r[-3], policy_version_max=r[-2], staleness=r[-1])


def overlaps(*, session: Session, run_id: int, step: int, split: str, other_run_id: int, other_split: str,
             limit: int) -> StepOverlaps:
    """The steps of `other_run_id` (split `other_split`) that answered some of the prompts of (run, step,
    split), nearest to `step` first: the pairs a side-by-side view can align."""
    prompts = (select(Sample.prompt_index).where(Sample.run_id == run_id, Sample.step == step,
                                                 Sample.split == split, Sample.prompt_index.is_not(None))
               .distinct())
    n = session.exec(select(func.count()).select_from(prompts.subquery())).one()
    shared = func.count(Sample.prompt_index.distinct())
    stmt = (select(Sample.step, shared).where(Sample.run_id == other_run_id, Sample.split == other_split,
                                               Sample.prompt_index.in_(prompts))
            .group_by(Sample.step))
    found = [(s, c) for s, c in session.execute(stmt).all()
             if not (other_run_id == run_id and other_split == split and s == step)]
    found.sort(key=lambda sc: (abs(sc[0] - step), -sc[0]))
    return StepOverlaps(prompts=n, data=[StepOverlap(run_id=other_run_id, step=s, split=other_split, shared_prompts=c)
                                         for s, c in found[:limit]])


EXPORT_COLUMNS = ["id", "step", "split", "sample_index", "prompt_index", "group_uid", "data_source", "prompt",
                  "response", "score", "reward", "ground_truth", "tokens", "old_log_probs", "ref_log_probs",
                  "advantages", "values", "extras", "wall_time", "num_turns", "tool_error", "turns", "loss_mask",
                  "policy_versions", "policy_version_min", "policy_version_max", "staleness", "staleness_worst"]
ARRAY_COLUMNS = {"tokens", "old_log_probs", "ref_log_probs", "advantages", "values", "extras", "turns", "loss_mask",
                 "policy_versions"}


def export(*, session: Session, run_id: int, fmt: str, steps: list[int] | None = None, split: str | None = None,
           prompt_index: int | None = None, data_source: str | None = None, text: str | None = None,
           min_score: float | None = None, max_score: float | None = None,
           turns: TurnFilters | None = None, versions: VersionFilters | None = None) -> bytes:
    """The filtered samples as a file: `jsonl` keeps arrays and extras as JSON values; `csv` writes them as JSON
    text in their cells; `parquet` keeps the per-token arrays as list columns and extras as JSON text."""
    sub = _filtered(run_id, steps=steps, split=split, prompt_index=prompt_index, data_source=data_source, text=text,
                    min_score=min_score, max_score=max_score, turns=turns, versions=versions).subquery()
    query = select(*[sub.c[c] for c in EXPORT_COLUMNS]).order_by(sub.c.step, sub.c.split, sub.c.sample_index)
    records = [dict(zip(EXPORT_COLUMNS, r)) for r in session.execute(query).all()]
    if fmt == "jsonl":
        return "".join(json.dumps(r, allow_nan=False, default=str) + "\n" for r in records).encode()
    import pandas as pd

    frame = pd.DataFrame.from_records(records, columns=EXPORT_COLUMNS)
    if fmt == "csv":
        for column in ARRAY_COLUMNS:
            frame[column] = [None if v is None else json.dumps(v) for v in frame[column]]
        return frame.to_csv(index=False).encode()
    for column in ("extras", "turns"):  # nested objects: JSON text (parquet list columns hold plain values)
        frame[column] = [None if v is None else json.dumps(v) for v in frame[column]]
    buffer = io.BytesIO()
    frame.to_parquet(buffer, index=False)
    return buffer.getvalue()
