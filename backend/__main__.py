"""`python -m backend [--host H] [--port P] [--data-dir D] [--demo] [--access-log]` starts the server
(default http://127.0.0.1:8000, data in ./.rlstudio/). Flags override RLSTUDIO_* environment variables."""
from __future__ import annotations

import argparse
import logging
from pathlib import Path


def click_here(host: str, port: int, data_dir: Path, demo_run: int | None) -> str:
    """The start-up banner, printed last (after Ray and uvicorn have said their piece): where to click."""
    shown = "127.0.0.1" if host in ("0.0.0.0", "::", "") else host
    base = f"http://{shown}:{port}"
    lines = [f"rlstudio is up: open {base}/", f"  API docs {base}/docs · data {data_dir.resolve()}"]
    if demo_run is not None:
        lines.insert(1, f"  the demo run trains at {base}/runs/{demo_run}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m backend", description=__doc__)
    parser.add_argument("--host", help="bind address (default 127.0.0.1; any other needs an API token: one is "
                        "generated and printed when RLSTUDIO_API_TOKEN is not set)")
    parser.add_argument("--port", type=int, help="port (default 8000)")
    parser.add_argument("--data-dir", type=Path, help="database, run directories (default ./.rlstudio)")
    parser.add_argument("--demo", action="store_true",
                        help="launch the tiny arithmetic demo run (the seed's PPO, preset demo_ppo) on start "
                        "unless one already exists")
    parser.add_argument("--log-level", default="info")
    # every ingest request would print a line (several a second while a run trains) and scroll the URL away
    parser.add_argument("--access-log", action="store_true", help="print one line per HTTP request (off by default)")
    args = parser.parse_args(argv)

    import uvicorn

    from backend.api_token import ensure_api_token
    from backend.app import create_app
    from backend.settings import Settings

    overrides = {k: v for k, v in {"host": args.host, "port": args.port, "data_dir": args.data_dir}.items()
                 if v is not None}
    settings = Settings(**overrides)
    own_log = logging.getLogger("rlstudio")
    own_log.setLevel(settings.log_level.upper())
    own_log.addHandler(logging.StreamHandler())
    own_log.handlers[-1].setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
    notice = ensure_api_token(settings)  # before the app exists: no request is ever served without it
    if notice:
        print(notice, flush=True)
    app = create_app(settings)
    demo_run = None
    if args.demo:
        from backend.services.demo import ensure_demo_run

        demo_run = ensure_demo_run(app)
    banner = click_here(settings.host, settings.port, settings.data_dir, demo_run)

    class Server(uvicorn.Server):
        async def startup(self, sockets=None):
            await super().startup(sockets=sockets)
            if self.started:
                print(banner, flush=True)

    config = uvicorn.Config(app, host=settings.host, port=settings.port, log_level=args.log_level,
                            access_log=args.access_log, timeout_graceful_shutdown=5)
    try:
        Server(config).run()
    except KeyboardInterrupt:
        # uvicorn shuts down cleanly on Ctrl-C, then raises the signal again for whoever ran it: that reaches here
        # as KeyboardInterrupt, whose traceback would follow "Application shutdown complete". Exit as a shell
        # expects of an interrupted program (128 + SIGINT), quietly.
        raise SystemExit(130) from None


if __name__ == "__main__":
    main()
