"""Importing a run made elsewhere: `POST /imports/verl` (verl's file-logger JSONL, with its Hydra config and
generation dumps) and `POST /imports/tensorboard` (event files), each a multipart/form-data upload.

The upload is streamed: Starlette spools each file part to a temporary file as it arrives (a part over 1 MiB
goes to disk), and the readers go through it a line or a record at a time, so a 1 GB file never sits in memory.
These routes therefore skip the JSON body guard (`streams_body`). A file that is not what it should be is a 422
whose `loc` names the form field (`["body", "metrics"]`) and whose message names the file and the line; a failed
import stores nothing (backend/services/imports.py)."""
from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Request, status
from fastapi.responses import JSONResponse
from sqlmodel import Session
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import FormData, UploadFile
from starlette.exceptions import HTTPException
from starlette.formparsers import MultiPartException

from backend.api.errors import safe_text
from backend.imports.errors import BadFile
from backend.models.run import RunPublic
from backend.models.run_import import RunImported
from backend.services import imports
from backend.services.events import wake_on_commit
from backend.services.health.store import HEALTH_CHECKS

router = APIRouter(tags=["imports"])

MAX_FILES = 100_000  # a long run's rollout_data_dir has a file per step
COPY_CHUNK = 1024 * 1024


def _file_schema(description: str, many: bool = False) -> dict[str, Any]:
    one = {"type": "string", "format": "binary"}
    return {"type": "array", "items": one, "description": description} if many else {**one,
                                                                                        "description": description}


TARGET_FIELDS = {
    "experiment": {"type": "string", "maxLength": 200, "description": "experiment name (made when new); default "
                                                                        "`imported`"},
    "name": {"type": "string", "maxLength": 200, "description": "run name; default: the config's "
                                                                  "trainer.experiment_name, else the file's name"},
    "tags": {"type": "array", "items": {"type": "string", "minLength": 1, "maxLength": 100}},
    "notes": {"type": "string", "maxLength": 100_000},
}


def _body(required: list[str], files: dict[str, Any]) -> dict[str, Any]:
    return {"requestBody": {"required": True, "content": {"multipart/form-data": {"schema": {
        "type": "object", "required": required, "properties": {**files, **TARGET_FIELDS}}}}}}


def unprocessable(field: str, msg: str, kind: str = "value_error") -> JSONResponse:
    return JSONResponse({"detail": [{"loc": ["body", field], "msg": msg, "type": kind}]},
                        status_code=status.HTTP_422_UNPROCESSABLE_CONTENT)


def _bad_file(exc: BadFile) -> JSONResponse:
    where = f" {exc.unit} {exc.line}" if exc.line is not None else ""
    return unprocessable(exc.field, f"{safe_text(exc.file)}{where}: {safe_text(exc.problem, 300)}", "file_invalid")


async def _form(request: Request) -> FormData | JSONResponse:
    media = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if media != "multipart/form-data":
        got = f"not {safe_text(media, 80)}" if media else "the request has none"
        return unprocessable("body", f"body: send the files as multipart/form-data ({got}), e.g. "
                                     "curl -F metrics=@metrics.jsonl", "content_type")
    try:
        return await request.form(max_files=MAX_FILES, max_fields=1000)
    except (HTTPException, MultiPartException) as exc:  # a malformed body, too many parts, a huge text field
        why = exc.detail if isinstance(exc, HTTPException) else exc.message
        return unprocessable("body", f"body: not a readable multipart/form-data upload ({safe_text(why)})")


def _target(form: FormData) -> imports.Target | JSONResponse:
    fields: dict[str, Any] = {}
    for key, limit in (("experiment", 200), ("name", 200), ("notes", 100_000)):
        value = form.get(key)
        if isinstance(value, UploadFile):
            return unprocessable(key, f"{key}: text, not a file")
        if value is not None and len(value) > limit:
            return unprocessable(key, f"{key}: at most {limit} characters")
        if value:
            fields[key] = value.strip() if key != "notes" else value
    tags = [t for t in form.getlist("tags") if not isinstance(t, UploadFile)]
    tags = [t.strip() for tag in tags for t in tag.split(",") if t.strip()]
    if any(len(tag) > 100 for tag in tags):
        return unprocessable("tags", "tags: each tag must be 1-100 characters")
    return imports.Target(experiment=fields.get("experiment") or "imported", name=fields.get("name", ""),
                          tags=tags, notes=fields.get("notes", ""))


def _files(form: FormData, field: str) -> list[UploadFile] | JSONResponse:
    values = form.getlist(field)
    if any(not isinstance(value, UploadFile) for value in values):
        return unprocessable(field, f"{field}: a file part (filename=...), not a text field")
    return [value for value in values if value.filename or value.size]


def _upload(part: UploadFile) -> imports.Upload:
    part.file.seek(0)
    return imports.Upload(name=Path(part.filename or "upload").name, stream=part.file)


def _session(request: Request) -> Session:
    session = Session(request.app.state.engine, expire_on_commit=False)
    wake_on_commit(session, request.app.state.bus)  # the live feeds see the imported run arrive
    session.info[HEALTH_CHECKS] = request.app.state.settings.health_checks
    return session


def _answer(run, summary: imports.Summary) -> JSONResponse:
    body = RunImported(run=RunPublic.model_validate(run), lines=summary.lines, steps=summary.steps,
                       points=summary.points, samples=summary.samples, skipped_values=summary.skipped,
                       notes=summary.notes)
    return JSONResponse(body.model_dump(mode="json"), status_code=status.HTTP_201_CREATED)


IMPORT_RESPONSES: dict[int | str, dict[str, Any]] = {
    201: {"model": RunImported, "description": "the run made"},
    422: {"description": "a file that is not what the field takes (`loc`: the field; `msg`: the file, the line, the "
                         "problem), or a body that is not multipart/form-data",
          "content": {"application/json": {"schema": {"$ref": "#/components/schemas/HTTPValidationError"}}}}}


@router.post("/imports/verl", status_code=status.HTTP_201_CREATED, response_model=RunImported,
             responses=IMPORT_RESPONSES, openapi_extra=_body(["metrics"], {
                 "metrics": _file_schema("verl's file-logger JSONL (VERL_FILE_LOGGER_PATH): a line per step"),
                 "config": _file_schema("the run's Hydra config (.hydra/config.yaml) or a YAML/JSON of it"),
                 "rollout": _file_schema("trainer.rollout_data_dir's <step>.jsonl files", many=True),
                 "validation": _file_schema("trainer.validation_data_dir's <step>.jsonl files", many=True)}))
async def import_verl(request: Request):
    """A verl run as a new rlstudio run (status `succeeded`, source `import`): its metrics, its config, its
    training and validation answers. 422 names the form field and the file's line that is not verl's shape."""
    form = await _form(request)
    if isinstance(form, JSONResponse):
        return form
    try:
        target = _target(form)
        if isinstance(target, JSONResponse):
            return target
        parts = {field: _files(form, field) for field in ("metrics", "config", "rollout", "validation")}
        for value in parts.values():
            if isinstance(value, JSONResponse):
                return value
        if len(parts["metrics"]) != 1:
            return unprocessable("metrics", "metrics: one file, verl's file-logger JSONL "
                                            f"({'none' if not parts['metrics'] else len(parts['metrics'])} given)")
        if len(parts["config"]) > 1:
            return unprocessable("config", "config: one file (.hydra/config.yaml)")
        files = imports.VerlFiles(metrics=_upload(parts["metrics"][0]),
                                  config=_upload(parts["config"][0]) if parts["config"] else None,
                                  rollout=[_upload(p) for p in parts["rollout"]],
                                  validation=[_upload(p) for p in parts["validation"]])
        settings = request.app.state.settings

        def work():
            with _session(request) as session:
                return imports.import_verl(session=session, runs_dir=settings.runs_dir, files=files, target=target)

        try:
            run, summary = await run_in_threadpool(work)
        except BadFile as exc:
            return _bad_file(exc)
        return _answer(run, summary)
    finally:
        await form.close()


@router.post("/imports/tensorboard", status_code=status.HTTP_201_CREATED, response_model=RunImported,
             responses=IMPORT_RESPONSES, openapi_extra=_body(["events"], {
                 "events": _file_schema("event files (events.out.tfevents.*) of one run", many=True)}))
async def import_tensorboard(request: Request):
    """A run from TensorBoard event files (verl's `tensorboard` logger, TRL's default): every scalar as a
    metric. 422 names `events` and the file."""
    form = await _form(request)
    if isinstance(form, JSONResponse):
        return form
    try:
        target = _target(form)
        if isinstance(target, JSONResponse):
            return target
        parts = _files(form, "events")
        if isinstance(parts, JSONResponse):
            return parts
        if not parts:
            return unprocessable("events", "events: no event file given (events.out.tfevents.*)")
        settings = request.app.state.settings

        def work():
            # TensorBoard's loader reads a path: each part is copied to a file of its own, a chunk at a time
            with tempfile.TemporaryDirectory(prefix="rlstudio-tb-") as tmp, _session(request) as session:
                files = []
                for i, part in enumerate(parts):
                    path = Path(tmp) / f"{i}.tfevents"
                    part.file.seek(0)
                    with path.open("wb") as out:
                        shutil.copyfileobj(part.file, out, COPY_CHUNK)
                    files.append((Path(part.filename or f"events-{i}").name, path))
                return imports.import_tensorboard(session=session, runs_dir=settings.runs_dir, files=files,
                                                  target=target)

        try:
            run, summary = await run_in_threadpool(work)
        except BadFile as exc:
            return _bad_file(exc)
        return _answer(run, summary)
    finally:
        await form.close()


for route in router.routes:  # the body is a stream of files, read here: the JSON guard stays out of the way
    route.endpoint.streams_body = True  # type: ignore[attr-defined]
