"""Benchmarks of the real engine on fixed workloads: `python -m engine.bench --workload w1 [--vs-trl] [--algo ppo]`.

The engine part builds the same config a training run would, starts the same worker group and `TrainWorker`
(one worker: in this process, or through Ray with `ray_init.mode=ray`), and times `PPOTrainer.train_step` on
synthetic prompts: nothing in the step is benchmark-only.
See engine/bench/__main__.py for the options and engine/bench/README.md for the figures.
"""
