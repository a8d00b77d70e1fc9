from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Depends, HTTPException, Query, status
from sqlalchemy import func, or_
from sqlmodel import select

from backend.api.deps import IngestRunDep, SessionDep, SettingsDep, check_body_size, get_run_or_404
from backend.models import IngestResult, Sample, SampleAnswer, SampleAnswers, SamplePublic, SampleRows, SamplesIngest, SamplesPublic, SampleSteps, StepOverlaps
from backend.services import samples

router = APIRouter(tags=["samples"])
ingest_router = APIRouter(tags=["samples"])  # authenticated by the run's ingest token or the API token

Order = Literal["step", "-step", "score", "-score", "prompt_index", "id"]


@ingest_router.post("/runs/{run_id}/samples", response_model=IngestResult, dependencies=[Depends(check_body_size)],
             responses={413: {"description": "more than RLSTUDIO_MAX_SAMPLES_PER_REQUEST (default 1,000)"}})
def ingest_samples(request_run: IngestRunDep, session: SessionDep, settings: SettingsDep, body: SamplesIngest):
    """Batch ingest, idempotent on (run, split, step, sample_index)."""
    if len(body.samples) > settings.max_samples_per_request:
        raise HTTPException(status.HTTP_413_CONTENT_TOO_LARGE,
                            f"samples: {len(body.samples)} in one request; the maximum is "
                            f"{settings.max_samples_per_request}. Split the batch.")
    run = session.merge(request_run)
    accepted = samples.ingest(session, run, body.samples)
    bus = session.info.get("bus")
    if bus is not None:
        bus.notify()
    return IngestResult(accepted=accepted)


def _filtered(stmt, step, split, prompt_index, group_uid, data_source, q, min_score, max_score):
    if step is not None:
        stmt = stmt.where(Sample.step == step)
    if split is not None:
        stmt = stmt.where(Sample.split == split)
    if prompt_index is not None:
        stmt = stmt.where(Sample.prompt_index == prompt_index)
    if group_uid is not None:
        stmt = stmt.where(Sample.group_uid == group_uid)
    if data_source is not None:
        stmt = stmt.where(Sample.data_source == data_source)
    if q:
        stmt = stmt.where(or_(Sample.prompt.contains(q), Sample.response.contains(q)))
    if min_score is not None:
        stmt = stmt.where(Sample.score >= min_score)
    if max_score is not None:
        stmt = stmt.where(Sample.score <= max_score)
    return stmt


def _ordered(stmt, order: str):
    column = getattr(Sample, order.lstrip("-"))
    return stmt.order_by(column.desc() if order.startswith("-") else column.asc(), Sample.sample_index, Sample.id)


@router.get("/runs/{run_id}/samples", response_model=SamplesPublic)
def list_samples(session: SessionDep, run_id: int,
                 step: int | None = None, split: Literal["train", "val"] | None = None,
                 prompt_index: int | None = None, group_uid: str | None = None, data_source: str | None = None,
                 q: Annotated[str | None, Query(max_length=500, description="prompt or response contains")] = None,
                 min_score: float | None = None, max_score: float | None = None,
                 order: Order = "step",
                 skip: Annotated[int, Query(ge=0)] = 0, limit: Annotated[int, Query(ge=1, le=1000)] = 100):
    get_run_or_404(session, run_id)
    stmt = _filtered(select(Sample).where(Sample.run_id == run_id), step, split, prompt_index, group_uid,
                     data_source, q, min_score, max_score)
    count = session.exec(select(func.count()).select_from(stmt.subquery())).one()
    rows = session.exec(_ordered(stmt, order).offset(skip).limit(limit)).all()
    return SamplesPublic(data=[SamplePublic.model_validate(s) for s in rows], count=count)


@router.get("/runs/{run_id}/samples/steps", response_model=SampleSteps)
def list_sample_steps(session: SessionDep, run_id: int):
    """The steps that have samples, with counts and mean score (for the step slider)."""
    get_run_or_404(session, run_id)
    data = samples.steps(session, run_id)
    return SampleSteps(data=data, count=len(data))


@router.get("/runs/{run_id}/samples/rows", response_model=SampleRows)
def list_sample_rows(session: SessionDep, run_id: int,
                step: Annotated[list[int] | None, Query(max_length=1000)] = None,
                split: Literal["train", "val"] | None = None, data_source: str | None = None,
                q: Annotated[str | None, Query(max_length=500, description="prompt or response contains")] = None,
                min_score: float | None = None, max_score: float | None = None,
                limit: Annotated[int, Query(ge=1, le=50_000)] = 10_000):
    """Answers as light table rows (ids, scores, mean advantage, length, first line; no prompt, no per-token
    arrays): the dense samples table and the "What changed" comparison of validations."""
    get_run_or_404(session, run_id)
    stmt = _filtered(select(Sample).where(Sample.run_id == run_id), None, split, None, None, data_source, q,
                     min_score, max_score)
    if step:
        stmt = stmt.where(Sample.step.in_(step))
    data, count = samples.rows(session, stmt, limit=limit)
    return SampleRows(data=data, count=count)


@router.get("/runs/{run_id}/samples/overlap", response_model=StepOverlaps)
def list_step_overlaps(session: SessionDep, run_id: int, step: int, split: Literal["train", "val"] = "train",
                 other_run_id: Annotated[int | None, Query(description="the run to search (default: this one)")] = None,
                 other_split: Literal["train", "val"] | None = None,
                 limit: Annotated[int, Query(ge=1, le=1000)] = 20):
    """Steps that answered some of the same prompts as (run, step, split), nearest first: training shuffles
    its prompts, so two neighbouring training steps usually share none."""
    get_run_or_404(session, run_id)
    other = run_id if other_run_id is None else other_run_id
    get_run_or_404(session, other)
    return samples.overlaps(session, run_id=run_id, step=step, split=split, other_run_id=other,
                            other_split=other_split or split, limit=limit)


@router.get("/runs/{run_id}/samples/{sample_id}", response_model=SamplePublic)
def get_sample(session: SessionDep, run_id: int, sample_id: int):
    sample = session.get(Sample, sample_id)
    if sample is None or sample.run_id != run_id:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"Sample {sample_id} of run {run_id} not found.")
    return sample


@router.get("/samples/by-prompt", response_model=SamplesPublic)
def list_samples_by_prompt(session: SessionDep,
                run_id: Annotated[list[int], Query(min_length=1, max_length=50)],
                prompt_index: int,
                step: Annotated[list[int] | None, Query(max_length=1000)] = None,
                split: Literal["train", "val"] | None = None,
                skip: Annotated[int, Query(ge=0)] = 0, limit: Annotated[int, Query(ge=1, le=1000)] = 200):
    """The same prompt's answers across runs and steps (side-by-side views), ordered by run, step, position."""
    stmt = select(Sample).where(Sample.run_id.in_(run_id), Sample.prompt_index == prompt_index)
    if step:
        stmt = stmt.where(Sample.step.in_(step))
    if split is not None:
        stmt = stmt.where(Sample.split == split)
    count = session.exec(select(func.count()).select_from(stmt.subquery())).one()
    rows = session.exec(stmt.order_by(Sample.run_id, Sample.step, Sample.sample_index).offset(skip).limit(limit)).all()
    return SamplesPublic(data=[SamplePublic.model_validate(s) for s in rows], count=count)


@router.get("/samples/newest", response_model=SampleAnswers)
def list_newest_answers(session: SessionDep,
                   run_id: Annotated[list[int], Query(min_length=1, max_length=100)],
                   split: Literal["train", "val"] = "train",
                   limit: Annotated[int, Query(ge=1, le=1000, description="answers per run")] = 64):
    """Each run's answers at its newest step of `split` (no prompts, no per-token arrays): what the runs
    table's degenerate-answer check reads, for many runs in one request."""
    out: list[SampleAnswer] = []
    for rid in dict.fromkeys(run_id):
        newest = session.exec(select(func.max(Sample.step)).where(Sample.run_id == rid, Sample.split == split)).one()
        if newest is None:
            continue
        rows = session.execute(select(Sample.id, Sample.step, Sample.sample_index, Sample.response, Sample.tokens,
                                      Sample.score)
                               .where(Sample.run_id == rid, Sample.split == split, Sample.step == newest)
                               .order_by(Sample.sample_index).limit(limit)).all()
        out.extend(SampleAnswer(id=r[0], run_id=rid, step=r[1], split=split, sample_index=r[2], response=r[3],
                                tokens=r[4], score=r[5]) for r in rows)
    return SampleAnswers(data=out, count=len(out))

