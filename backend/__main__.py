"""`python -m backend [--host H] [--port P] [--data-dir D] [--demo]` starts the server
(default http://127.0.0.1:8000, data in ./.rlstudio/). Flags override RLSTUDIO_* environment variables."""
from __future__ import annotations

import argparse
from pathlib import Path


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m backend", description=__doc__)
    parser.add_argument("--host", help="bind address (default 127.0.0.1; any other needs an API token: one is "
                        "generated and printed when RLSTUDIO_API_TOKEN is not set)")
    parser.add_argument("--port", type=int, help="port (default 8000)")
    parser.add_argument("--data-dir", type=Path, help="database, run directories (default ./.rlstudio)")
    parser.add_argument("--demo", action="store_true",
                        help="launch the tiny arithmetic demo run on start unless one already exists")
    parser.add_argument("--log-level", default="info")
    args = parser.parse_args(argv)

    import uvicorn

    from backend.api_token import ensure_api_token
    from backend.app import create_app
    from backend.settings import Settings

    overrides = {k: v for k, v in {"host": args.host, "port": args.port, "data_dir": args.data_dir}.items()
                 if v is not None}
    settings = Settings(**overrides)
    notice = ensure_api_token(settings)  # before the app exists: no request is ever served without it
    if notice:
        print(notice, flush=True)
    app = create_app(settings)
    if args.demo:
        from backend.services.demo import ensure_demo_run

        ensure_demo_run(app)
    print(f"rlstudio: http://{settings.host}:{settings.port}  (API docs: /docs, data: {settings.data_dir.resolve()})",
          flush=True)
    uvicorn.run(app, host=settings.host, port=settings.port, log_level=args.log_level, timeout_graceful_shutdown=5)


if __name__ == "__main__":
    main()
