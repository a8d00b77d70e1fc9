"""rlstudio from Python: launch, watch and read runs through the server's REST API.

    from backend.client import Client
    c = Client()                      # $RLSTUDIO_URL (default http://127.0.0.1:8000), $RLSTUDIO_API_TOKEN
    run = c.launch(["actor_rollout_ref.actor.optim.lr=3e-4"], preset="demo", experiment="lr")
    c.wait(run)                       # RunFailed if it failed or was lost
    c.metrics_df(run.id)              # pandas: a row per step, a column per key

`python -m backend.client sweep KEY=V1,V2 ...` launches a grid and prints its results table.
"""
from backend.client.api import ApiError, Client, RunFailed, WaitTimeout
from backend.client.sweep import format_table, parse_grid, results, sweep

__all__ = ["ApiError", "Client", "RunFailed", "WaitTimeout", "format_table", "parse_grid", "results", "sweep"]
