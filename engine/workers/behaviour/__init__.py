"""The async modes' behaviour policy on a worker: the copy of the actor the rollout samples with while the actor
trains (policy.py), the worker's side that owns it (host.py), and separate_async's rollout process that holds it
apart from the worker (process.py, and its child: child.py). The design: engine/trainer/ASYNC.md."""
