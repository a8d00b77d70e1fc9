"""What the server's run-health checks read from a real (tiny, in-process) GRPO run: verl's validation statistics
with val_kwargs.n > 1, the per-step share of groups without learning signal, the group id on every stored sample,
and the driver's heartbeat (the phase it enters, once per change). The logged numbers are checked against the
logged samples they summarise, so the wiring (which answers form a group) is tested, not just the names."""
from __future__ import annotations

from collections import defaultdict
from itertools import pairwise
from pathlib import Path

import pytest

from engine.loggers.base import Logger
from engine.trainer.learning_signal import METRIC as ZERO_STD
from engine.trainer.validation_metrics import validation_metrics
from tests.integration.helpers import base_args

VOTE_REWARD = Path(__file__).with_name("vote_reward.py")
RUN = {"algorithm.adv_estimator": "grpo", "trainer.n_gpus_per_node": 1, "data.train_batch_size": 8,
       "actor_rollout_ref.actor.ppo_mini_batch_size": 8, "trainer.total_training_steps": 2,
       "trainer.val_before_train": "True", "trainer.test_freq": 2, "trainer.save_freq": 2,
       "trainer.logger": "[console]", "ray_init.mode": "in_process",
       # 4 sampled answers per held-out prompt, voted on through the reward's `pred`
       "actor_rollout_ref.rollout.val_kwargs.n": 4, "actor_rollout_ref.rollout.val_kwargs.do_sample": "True",
       "actor_rollout_ref.rollout.val_kwargs.temperature": 1.0, "custom_reward_function.path": str(VOTE_REWARD)}


class Record(Logger):
    def __init__(self):
        self.metrics, self.samples, self.events = {}, defaultdict(list), []

    def log_metrics(self, step, metrics):
        self.metrics.setdefault(step, {}).update(metrics)
        self.events.append(("metrics", step))

    def log_samples(self, step, samples):
        self.samples[step].extend(samples)

    def log_phase(self, phase, step):
        self.events.append((phase, step))


def test_validation_signal_and_heartbeat(tiny_model, arith_data, tmp_path):
    from engine.config import build_config
    from engine.main_ppo import run

    record = Record()  # base_args gives overrides only (no --config-name)
    run(build_config(overrides=base_args(tiny_model, arith_data, tmp_path / "run", **RUN)), loggers=[record])

    # validation: verl's statistics of the logged answers, grouped by prompt
    for step in (0, 2):
        val = [s for s in record.samples[step] if s["split"] == "val"]
        assert len(val) == 32 * 4 and all(s["group_uid"] == f"val-{s['prompt_index']}" for s in val)
        expected = validation_metrics([s["data_source"] for s in val], [s["group_uid"] for s in val],
                                      [s["score"] for s in val], {"pred": [s["pred"] for s in val]})
        logged = {k: v for k, v in record.metrics[step].items() if k.startswith(("val-core/", "val-aux/arith/"))}
        assert logged == expected
        assert {"val-core/arith/reward/mean@4", "val-core/arith/reward/best@4/mean", "val-core/arith/reward/maj@4/mean",
                "val-aux/arith/reward/std@4", "val-aux/arith/reward/worst@4/mean", "val-aux/arith/reward/best@2/std",
                "val-aux/arith/reward/maj@2/mean"} <= logged.keys()

    # learning signal: the share of this step's groups whose answers all scored the same, from its samples
    for step in (1, 2):
        groups = defaultdict(list)
        for s in record.samples[step]:
            if s["split"] == "train":
                groups[s["group_uid"]].append(s["score"])
        assert len(groups) == 8 and all(len(g) == 4 for g in groups.values())
        assert record.metrics[step][ZERO_STD] == sum(len(set(g)) == 1 for g in groups.values()) / 8
        prompts = {s["prompt_index"] for s in record.samples[step] if s["split"] == "train"}
        assert len(prompts) == 8  # the data set row of each group: what lists a prompt across steps

    # heartbeat: the phases in loop order, each reported once as it is entered
    phases = [e for e in record.events if e[0] != "metrics"]
    assert all(a != b for a, b in pairwise(phases))
    assert phases[:2] == [("load_checkpoint", 0), ("validation", 0)]
    for step in (1, 2):
        names = [p for p, s in phases if s == step]
        assert names[:2] == ["gen", "reward"] and "adv" in names and "update_actor" in names
        assert names.index("reward") < names.index("adv") < names.index("update_actor")
    last = [p for p, s in phases if s == 2]
    assert last.index("update_actor") < last.index("validation") < last.index("save_checkpoint")
    assert phases[-1] == ("export_hf_model", 2)  # trainer.export_hf_model (default on) after the last step
    # each step's phases come before its metrics are logged
    assert record.events.index(("metrics", 1)) < record.events.index(("gen", 2))


def test_signal_is_counted_before_dapos_filter(tiny_model, arith_data, tmp_path):
    """With DAPO's dynamic sampling the trained batch has no zero-std group; the metric counts the generated ones,
    so it is exactly the share the filter dropped."""
    from engine.config import build_config
    from engine.main_ppo import run

    record = Record()
    dapo = {**RUN, "trainer.val_before_train": "False", "trainer.test_freq": -1, "trainer.save_freq": -1,
            "trainer.export_hf_model": "False", "algorithm.filter_groups.enable": "True",
            "algorithm.filter_groups.metric": "reward", "data.train_batch_size": 4,
            "actor_rollout_ref.actor.ppo_mini_batch_size": 4}
    run(build_config(overrides=base_args(tiny_model, arith_data, tmp_path / "run", **dapo)), loggers=[record])
    for step in (1, 2):
        m = record.metrics[step]
        assert m[ZERO_STD] == pytest.approx(1 - m["train/kept_group_fraction"], abs=1e-12)
        assert m["critic/degenerate_group_ratio"] == 0  # what was trained on: only groups with signal
        gens = [p for p, s in record.events if s == step and p == "gen"]
        assert len(gens) == m["train/num_gen_batches"]  # a heartbeat per generation round, each a phase change
        # the dropped groups' answers reach the samples store, marked, so the no-signal prompts can be listed
        train = [x for x in record.samples[step] if x["split"] == "train"]
        dropped = [x for x in train if x.get("dropped")]
        trained = [x for x in train if not x.get("dropped")]
        assert len(trained) == 4 * 4 and all("advantages" in x for x in trained)
        groups = defaultdict(list)
        for x in dropped:
            groups[x["group_uid"]].append(x["score"])
        assert all(len(set(scores)) == 1 for scores in groups.values())  # no signal in any dropped group
        assert not set(groups) & {x["group_uid"] for x in trained}
        generated = 4 * m["train/num_gen_batches"]
        assert len(groups) == round(m[ZERO_STD] * generated)  # every dropped group, and only those
        assert all("advantages" not in x and x["response"] is not None for x in dropped)
