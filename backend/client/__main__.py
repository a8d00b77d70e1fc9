"""`python -m backend.client sweep|results ...`: a grid of runs from the shell, and its results table."""
from __future__ import annotations

import argparse
import sys

from backend.client.api import ApiError, Client, RunFailed, WaitTimeout
from backend.client.sweep import DEFAULT_METRICS, format_table, parse_grid, results, sweep


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m backend.client", description=__doc__)
    parser.add_argument("--url", help="the server (default $RLSTUDIO_URL, else http://127.0.0.1:8000)")
    parser.add_argument("--token", help="API token (default $RLSTUDIO_API_TOKEN)")
    commands = parser.add_subparsers(dest="command", required=True)

    launch = commands.add_parser("sweep", help="launch a grid of runs into one experiment, wait, print the results",
                                 description="Arguments KEY=V1,V2,... are the grid's axes (every combination is "
                                             "one run); KEY=V arguments apply to every run. Example: sweep "
                                             "--preset demo --experiment lr-sweep "
                                             "actor_rollout_ref.actor.optim.lr=1e-4,3e-4,1e-3 "
                                             "trainer.total_training_steps=300")
    launch.add_argument("overrides", nargs="+", metavar="KEY=VALUE[,VALUE...]")
    launch.add_argument("--preset", help="engine/configs/<preset>.yaml under the overrides (e.g. demo)")
    launch.add_argument("--experiment", required=True, help="experiment name (made when new) or id")
    launch.add_argument("--tag", action="append", default=[], help="a tag for every run (repeatable)")
    launch.add_argument("--no-wait", action="store_true", help="launch and print the run ids only")
    launch.add_argument("--stop-on", action="append", default=[], metavar="ALARM",
                        help="cancel a run once this health alarm (kl-high, nonfinite, score-collapse, ...) has fired "
                             "for --stop-after steps (repeatable; trainer.health.stop_on)")
    launch.add_argument("--stop-after", type=int, default=1, metavar="N",
                        help="steps a --stop-on alarm must have fired for (default 1; trainer.health.stop_after_steps)")
    launch.add_argument("--poll", type=float, default=2.0, help="seconds between status checks (default 2)")
    launch.add_argument("--timeout", type=float, help="give up waiting after this many seconds")

    table = commands.add_parser("results", help="the results table of an experiment's runs")
    table.add_argument("--experiment", required=True, help="experiment name or id")
    table.add_argument("--key", action="append", default=[], help="a config key to show per run (repeatable)")
    for sub in (launch, table):
        sub.add_argument("--metric", action="append", default=None,
                         help="a metric key or regular expression to show (repeatable; default "
                              + ", ".join(DEFAULT_METRICS) + ")")
    args = parser.parse_args(argv)
    experiment = int(args.experiment) if args.experiment.isdigit() else args.experiment
    metrics = args.metric or DEFAULT_METRICS
    try:
        with Client(args.url, args.token) as client:
            if args.command == "results":
                runs = sorted(client.runs(experiment=experiment), key=lambda r: r.id)
                print(format_table(results(client, runs, metrics, args.key)))
                return 0
            grid, fixed = parse_grid(args.overrides)
            if not grid:
                parser.error("no axis to sweep: give at least one KEY=V1,V2")
            runs = sweep(client, grid, fixed=fixed, preset=args.preset, experiment=experiment, tags=args.tag,
                         stop_on=args.stop_on, stop_after_steps=args.stop_after)
            print(f"launched {len(runs)} runs into experiment '{args.experiment}': "
                  + ", ".join(f"{r.id} ({r.name})" for r in runs), flush=True)
            if args.no_wait:
                return 0
            done = client.wait(runs, poll=args.poll, timeout=args.timeout, check=False)
            print(format_table(results(client, done, metrics, list(grid))))
            return 0 if all(r.status.value == "succeeded" for r in done) else 1
    except (ApiError, RunFailed, WaitTimeout, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
