"""Samples (one per rollout): batch ingest (the run's token or the API token) and the samples views' queries."""
from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Depends, HTTPException, Query, Request, Response, status
from starlette.concurrency import run_in_threadpool

from backend.api.deps import IngestRunDep, SessionDep, SettingsDep, get_run_or_404
from backend.api.errors import ErrorMessage, unprocessable
from backend.api.routes.run_health import stop_asked, stop_job
from backend.models import (
    IngestResult,
    Sample,
    SampleAnswers,
    SamplePublic,
    SampleRows,
    SamplesIngest,
    SamplesPublic,
    SampleSteps,
    StepOverlaps,
)
from backend.services import samples

router = APIRouter(tags=["samples"])
ingest_router = APIRouter(tags=["samples"])  # authenticated by the run's ingest token or the API token

Order = Literal["step", "-step", "score", "-score", "prompt_index", "id"]
Split = Literal["train", "val"]


def turn_filters(
        num_turns: Annotated[int | None, Query(ge=1, le=100_000, description=(
            "multi-turn answers with exactly this many turns (the prompt, each model turn, each tool answer)"))] = None,
        min_turns: Annotated[int | None, Query(ge=1, le=100_000, description=(
            "multi-turn answers with at least this many turns (at most `max_turns`)"))] = None,
        max_turns: Annotated[int | None, Query(ge=1, le=100_000, description=(
            "multi-turn answers with at most this many turns; must be >= `min_turns` (else a 422 naming it)"))]
        = None,
        tool: Annotated[str | None, Query(min_length=1, max_length=200, pattern=r"^[A-Za-z0-9_.:-]+$",
                                          description="answers that called this tool (its name)")] = None,
        uses_tool: Annotated[bool | None, Query(description="answers that called some tool (true) / none (false)")]
        = None,
        tool_error: Annotated[bool | None, Query(description="answers with a failed tool call (true) / without "
                                                             "(false)")] = None) -> samples.TurnFilters:
    if min_turns is not None and max_turns is not None and min_turns > max_turns:
        raise unprocessable(["query", "max_turns"], f"max_turns ({max_turns}) is below min_turns ({min_turns}); "
                            "use max_turns >= min_turns")
    return samples.TurnFilters(num_turns=num_turns, min_turns=min_turns, max_turns=max_turns, tool=tool,
                               uses_tool=uses_tool, tool_error=tool_error)


TurnFiltersDep = Annotated[samples.TurnFilters, Depends(turn_filters)]


def version_filters(
        stale: Annotated[bool | None, Query(description=(
            "asynchronous runs: answers whose newest token is older than the trained step's weights (verl's "
            "trajectory staleness > 0; true) / on-policy answers and those without recorded versions (false)"))]
        = None,
        min_staleness: Annotated[int | None, Query(ge=0, le=2**62, description=(
            "answers at least this stale: (step - 1) - their newest policy version; above 0 it contradicts "
            "`stale=false` (a 422 naming it)"))] = None
) -> samples.VersionFilters:
    if stale is False and min_staleness:
        raise unprocessable(["query", "min_staleness"], f"min_staleness={min_staleness} asks for stale answers but "
                            "stale=false excludes them; drop one of the two")
    return samples.VersionFilters(stale=stale, min_staleness=min_staleness)


VersionFiltersDep = Annotated[samples.VersionFilters, Depends(version_filters)]


@ingest_router.post("/runs/{run_id}/samples", response_model=IngestResult,
                    responses={413: {"model": ErrorMessage,
                                     "description": "more than RLSTUDIO_MAX_SAMPLES_PER_REQUEST (default 1,000)"}})
async def ingest_samples(request: Request, run: IngestRunDep, session: SessionDep, settings: SettingsDep,
                         body: SamplesIngest):
    """Batch ingest, idempotent on (run, split, step, sample_index)."""
    if len(body.samples) > settings.max_samples_per_request:
        raise HTTPException(status.HTTP_413_CONTENT_TOO_LARGE,
                            f"samples: {len(body.samples)} in one request; the maximum is "
                            f"{settings.max_samples_per_request}. Split the batch.")
    accepted = await run_in_threadpool(samples.ingest, session=session, run=run, samples=body.samples)
    await stop_job(request, stop_asked(session))  # the run's health rule cancelled it: its Ray job goes too
    return IngestResult(accepted=accepted)


@router.get("/runs/{run_id}/samples", response_model=SamplesPublic)
def list_samples(session: SessionDep, run_id: int, turns: TurnFiltersDep, versions: VersionFiltersDep,
                 step: int | None = None, split: Split | None = None,
                 prompt_index: int | None = None, group_uid: str | None = None, data_source: str | None = None,
                 q: Annotated[str | None, Query(max_length=500, description="prompt or response contains")] = None,
                 min_score: float | None = None, max_score: float | None = None,
                 order: Order = "step",
                 skip: Annotated[int, Query(ge=0)] = 0, limit: Annotated[int, Query(ge=1, le=1000)] = 100):
    get_run_or_404(session, run_id)
    rows, count = samples.list_samples(session=session, run_id=run_id, step=step, split=split,
                                       prompt_index=prompt_index, group_uid=group_uid, data_source=data_source,
                                       text=q, min_score=min_score, max_score=max_score, order=order, skip=skip,
                                       limit=limit, turns=turns, versions=versions)
    return SamplesPublic(data=[SamplePublic.model_validate(s) for s in rows], count=count)


@router.get("/runs/{run_id}/samples/steps", response_model=SampleSteps)
def list_sample_steps(session: SessionDep, run_id: int):
    """The steps that have samples, with counts and mean score (for the step slider)."""
    get_run_or_404(session, run_id)
    data = samples.steps(session=session, run_id=run_id)
    return SampleSteps(data=data, count=len(data))


@router.get("/runs/{run_id}/samples/export", responses={200: {"content": {
    "application/x-ndjson": {}, "text/csv": {}, "application/vnd.apache.parquet": {}}}})
def export_samples(session: SessionDep, run_id: int, turns: TurnFiltersDep, versions: VersionFiltersDep,
                   format: Literal["jsonl", "csv", "parquet"] = "jsonl",
                   step: Annotated[list[int] | None, Query(max_length=1000)] = None, split: Split | None = None,
                   prompt_index: int | None = None, data_source: str | None = None,
                   q: Annotated[str | None, Query(max_length=500, description="prompt or response contains")]
                   = None,
                   min_score: float | None = None, max_score: float | None = None):
    """The run's samples that match the filters (the Samples page's), every field, as a file."""
    run = get_run_or_404(session, run_id)
    body = samples.export(session=session, run_id=run_id, fmt=format, steps=step, split=split,
                          prompt_index=prompt_index, data_source=data_source, text=q, min_score=min_score,
                          max_score=max_score, turns=turns, versions=versions)
    media = {"jsonl": "application/x-ndjson", "csv": "text/csv", "parquet": "application/vnd.apache.parquet"}[format]
    return Response(body, media_type=media,
                    headers={"Content-Disposition": f'attachment; filename="run-{run.id}-samples.{format}"'})


@router.get("/runs/{run_id}/samples/rows", response_model=SampleRows)
def list_sample_rows(session: SessionDep, run_id: int, turns: TurnFiltersDep, versions: VersionFiltersDep,
                     step: Annotated[list[int] | None, Query(max_length=1000)] = None,
                     split: Split | None = None, data_source: str | None = None,
                     q: Annotated[str | None, Query(max_length=500, description="prompt or response contains")]
                     = None,
                     min_score: float | None = None, max_score: float | None = None,
                     limit: Annotated[int, Query(ge=1, le=50_000)] = 10_000):
    """Answers as light table rows (ids, scores, mean advantage, length, first line; no prompt, no per-token
    arrays): the dense samples table and the "What changed" comparison of validations."""
    get_run_or_404(session, run_id)
    data, count = samples.rows(session=session, run_id=run_id, steps=step, split=split, data_source=data_source,
                               text=q, min_score=min_score, max_score=max_score, limit=limit, turns=turns,
                               versions=versions)
    return SampleRows(data=data, count=count)


@router.get("/runs/{run_id}/samples/overlap", response_model=StepOverlaps)
def list_step_overlaps(session: SessionDep, run_id: int, step: int, split: Split = "train",
                       other_run_id: Annotated[int | None, Query(
                           description="the run to search (default: this one)")] = None,
                       other_split: Split | None = None,
                       limit: Annotated[int, Query(ge=1, le=1000)] = 20):
    """Steps that answered some of the same prompts as (run, step, split), nearest first: training shuffles
    its prompts, so two neighbouring training steps usually share none."""
    get_run_or_404(session, run_id)
    other = run_id if other_run_id is None else other_run_id
    get_run_or_404(session, other)
    return samples.overlaps(session=session, run_id=run_id, step=step, split=split, other_run_id=other,
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
                           split: Split | None = None,
                           skip: Annotated[int, Query(ge=0)] = 0, limit: Annotated[int, Query(ge=1, le=1000)] = 200):
    """The same prompt's answers across runs and steps (side-by-side views), ordered by run, step, position."""
    rows, count = samples.by_prompt(session=session, run_ids=run_id, prompt_index=prompt_index, steps=step,
                                    split=split, skip=skip, limit=limit)
    return SamplesPublic(data=[SamplePublic.model_validate(s) for s in rows], count=count)


@router.get("/samples/newest", response_model=SampleAnswers)
def list_newest_answers(session: SessionDep,
                        run_id: Annotated[list[int], Query(min_length=1, max_length=100)],
                        split: Split = "train",
                        limit: Annotated[int, Query(ge=1, le=1000, description="answers per run")] = 64):
    """Each run's answers at its newest step of `split` (no prompts, no per-token arrays): what the runs
    table's degenerate-answer check reads, for many runs in one request."""
    data = samples.newest_answers(session=session, run_ids=run_id, split=split, limit=limit)
    return SampleAnswers(data=data, count=len(data))
