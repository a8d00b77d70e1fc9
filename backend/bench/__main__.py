"""`python -m backend.bench [--workload m1|samples] ...`: benchmarks against a fresh local server; they print
numbers (speed goals live here, never in timed tests).

  m1       metric ingest (8 runs x 20 keys x 2,000 steps, 8 clients), chart query, ingest->SSE;
           --health: the same without and with run health judged (a training run's keys), and the difference;
           --vs-mlflow: the same against `mlflow server` (needs the full `mlflow` package, not mlflow-skinny)
  samples  one W1-sized step (512 answers x 256 tokens with per-token arrays) per step via the engine's
           DashboardLogger: ingest time (goal <= 1 s), storage per step, chart latency meanwhile;
           --browser: the Samples page's first paint in headless Chromium (goal <= 1 s)
"""
from __future__ import annotations

import argparse
import shutil
import subprocess
import tempfile
from pathlib import Path

from backend.bench import metrics, samples


def mlflow_server_available(binary: str) -> str | None:
    """Why `mlflow server` cannot run here, or None when it can (mlflow-skinny has the command but not the
    server's modules)."""
    path = shutil.which(binary)
    if path is None:
        return f"no '{binary}' executable"
    python = Path(path).with_name("python")
    probe = [str(python), "-c", "import mlflow.server"] if python.exists() else [path, "server", "--help"]
    done = subprocess.run(probe, capture_output=True, text=True, timeout=300, check=False)
    if done.returncode != 0:
        last = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
        return f"'{path} server' cannot run ({last[0]})"
    return None


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m backend.bench", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workload", choices=["m1", "samples"], default="m1")
    parser.add_argument("--vs-mlflow", action="store_true", help="m1: also run it against `mlflow server`")
    parser.add_argument("--mlflow", default="mlflow", help="m1: the mlflow executable (default: on PATH)")
    parser.add_argument("--json", action="store_true", help="m1: print the results as JSON")
    parser.add_argument("--health", action="store_true", help="m1: ingest time without and with run health judged, "
                                                               "on a training run's 20 keys (16 of them judged)")
    parser.add_argument("--rounds", type=int, default=3, help="m1 --health: alternating rounds of each (default 3)")
    parser.add_argument("--answers", type=int, default=512, help="samples: answers per step (default 512)")
    parser.add_argument("--tokens", type=int, default=256, help="samples: tokens per answer (default 256)")
    parser.add_argument("--steps", type=int, default=5, help="samples: steps to ingest (default 5)")
    parser.add_argument("--pause", type=float, default=1.0, help="samples: idle seconds between steps (default 1)")
    parser.add_argument("--chart-steps", type=int, default=2000, help="samples: steps of the charted series")
    parser.add_argument("--browser", action="store_true", help="samples: time the Samples page in Chromium")
    parser.add_argument("--repeat", type=int, default=5, help="samples --browser: page loads per view (default 5)")
    args = parser.parse_args(argv)
    if args.workload == "samples":
        with tempfile.TemporaryDirectory(prefix="rlstudio-bench-") as tmp:
            samples.main(args, Path(tmp))
        return
    if args.vs_mlflow:
        why = mlflow_server_available(args.mlflow)
        if why:
            print(f"skipping the MLflow comparison: {why}. The dev extra has only mlflow-skinny; install the full "
                  "package in its own virtualenv (`python -m venv /tmp/mlflow && /tmp/mlflow/bin/pip install "
                  "mlflow`) and pass --mlflow /tmp/mlflow/bin/mlflow.", flush=True)
            args.vs_mlflow = False
        else:
            args.mlflow = shutil.which(args.mlflow)
    metrics.main(args)


if __name__ == "__main__":
    main()
