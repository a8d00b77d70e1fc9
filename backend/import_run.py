"""`python -m backend.import_run verl METRICS.jsonl [--config .hydra/config.yaml] [--rollout-dir DIR]
[--validation-dir DIR]` and `python -m backend.import_run tensorboard PATH...`: a run made elsewhere becomes an
rlstudio run (metrics, config, answers). Written straight into the database of `--data-dir` (default
$RLSTUDIO_DATA_DIR or ./.rlstudio; $RLSTUDIO_DATABASE_URL wins), or uploaded to a running server with `--url`
(token: $RLSTUDIO_API_TOKEN). A bad file prints the file, the line and the problem, stores nothing, exit 2."""
from __future__ import annotations

import argparse
import json
import os
import sys
from contextlib import ExitStack
from pathlib import Path

EVENTS_GLOB = "events.out.tfevents.*"


def _jsonl_files(directory: Path | None) -> list[Path]:
    if directory is None:
        return []
    if not directory.is_dir():
        raise SystemExit(f"error: {directory}: not a directory (verl's rollout_data_dir / validation_data_dir)")
    return sorted(directory.glob("*.jsonl"), key=lambda p: (len(p.stem), p.stem))


def _event_files(paths: list[Path]) -> list[Path]:
    found: list[Path] = []
    for path in paths:
        if path.is_dir():
            found.extend(sorted(path.rglob(EVENTS_GLOB)))
        elif path.is_file():
            found.append(path)
        else:
            raise SystemExit(f"error: {path}: no such file or directory")
    if not found:
        raise SystemExit(f"error: no TensorBoard event files ({EVENTS_GLOB}) under {', '.join(map(str, paths))}")
    return found


def _config_of(args) -> Path | None:
    if args.config is not None:
        return args.config
    beside = args.path.parent / ".hydra" / "config.yaml"  # verl run from its Hydra output directory
    return beside if beside.is_file() else None


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m backend.import_run", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    kinds = parser.add_subparsers(dest="kind", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--experiment", default="imported", help="experiment name (made when new)")
    common.add_argument("--name", default="", help="run name (default: trainer.experiment_name, else the file)")
    common.add_argument("--tag", action="append", default=[], help="a tag (repeatable)")
    common.add_argument("--notes", default="")
    where = common.add_mutually_exclusive_group()
    where.add_argument("--data-dir", type=Path, help="write into this data directory's database")
    where.add_argument("--url", help="upload to this server instead (e.g. http://127.0.0.1:8000)")
    verl = kinds.add_parser("verl", parents=[common], help="verl's file-logger JSONL (+ config, dumps)")
    verl.add_argument("path", type=Path, help="the JSONL at VERL_FILE_LOGGER_PATH")
    verl.add_argument("--config", type=Path, help="the run's .hydra/config.yaml (default: one beside PATH's "
                                                  ".hydra/ when there is one)")
    verl.add_argument("--rollout-dir", type=Path, help="trainer.rollout_data_dir (its <step>.jsonl files)")
    verl.add_argument("--validation-dir", type=Path, help="trainer.validation_data_dir")
    tb = kinds.add_parser("tensorboard", parents=[common], help="TensorBoard event files or their directories")
    tb.add_argument("paths", type=Path, nargs="+")
    return parser


def _into_database(args) -> dict:
    from sqlmodel import Session

    from backend import db
    from backend.models.run import RunPublic
    from backend.services import imports
    from backend.settings import Settings

    settings = Settings(**({"data_dir": args.data_dir} if args.data_dir else {}))
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    settings.runs_dir.mkdir(parents=True, exist_ok=True)
    db.upgrade(settings.db_url)
    engine = db.make_engine(settings.db_url)
    target = imports.Target(experiment=args.experiment, name=args.name, tags=args.tag, notes=args.notes)
    try:
        with Session(engine, expire_on_commit=False) as session, ExitStack() as files:
            def upload(path: Path) -> imports.Upload:
                return imports.Upload(name=path.name, stream=files.enter_context(path.open("rb")))

            if args.kind == "verl":
                config = _config_of(args)
                run, summary = imports.import_verl(session=session, runs_dir=settings.runs_dir, target=target,
                                                   files=imports.VerlFiles(
                    metrics=upload(args.path), config=upload(config) if config else None,
                    rollout=[upload(p) for p in _jsonl_files(args.rollout_dir)],
                    validation=[upload(p) for p in _jsonl_files(args.validation_dir)]))
            else:
                run, summary = imports.import_tensorboard(session=session, runs_dir=settings.runs_dir,
                                                          target=target,
                                                          files=[(p.name, p) for p in _event_files(args.paths)])
        return {"run": RunPublic.model_validate(run).model_dump(mode="json"), "points": summary.points,
                "steps": summary.steps, "samples": summary.samples, "skipped_values": summary.skipped}
    finally:
        engine.dispose()


def _upload(args) -> dict:
    import httpx

    token = os.environ.get("RLSTUDIO_API_TOKEN")
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    data = {"experiment": args.experiment, "name": args.name, "notes": args.notes, "tags": args.tag}
    with ExitStack() as stack:
        def part(field: str, path: Path) -> tuple[str, tuple[str, object]]:
            return field, (path.name, stack.enter_context(path.open("rb")))  # httpx streams it in chunks

        if args.kind == "verl":
            config = _config_of(args)
            files = [part("metrics", args.path)] + ([part("config", config)] if config else []) + \
                [part("rollout", p) for p in _jsonl_files(args.rollout_dir)] + \
                [part("validation", p) for p in _jsonl_files(args.validation_dir)]
        else:
            files = [part("events", p) for p in _event_files(args.paths)]
        response = httpx.post(f"{args.url.rstrip('/')}/api/v1/imports/{args.kind}", data=data, files=files,
                              headers=headers, timeout=None)
    if response.status_code == 422:
        raise _Refused("; ".join(d.get("msg", "") for d in response.json().get("detail", [])))
    if response.status_code >= 400:
        raise SystemExit(f"error: {response.status_code} {response.text[:500]}")
    return response.json()


class _Refused(Exception):
    pass


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    from backend.imports.errors import BadFile

    missing = [p for p in ([args.path] if args.kind == "verl" else []) if not p.is_file()]
    if missing:
        print(f"error: {missing[0]}: no such file", file=sys.stderr)
        return 2
    try:
        result = _upload(args) if args.url else _into_database(args)
    except (BadFile, _Refused) as exc:
        print(f"error: {exc}", file=sys.stderr)
        print("nothing was stored.", file=sys.stderr)
        return 2
    run = result["run"]
    samples = ", ".join(f"{n} {split}" for split, n in result["samples"].items()) or "none"
    print(f"imported run {run['id']} ({run['name']}): {result['steps']} steps, {result['points']} points, "
          f"answers: {samples}")
    if result.get("skipped_values"):
        print(f"left out (not numbers): {json.dumps(result['skipped_values'])}")
    if args.url:
        print(f"{args.url.rstrip('/')}/runs/{run['id']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
