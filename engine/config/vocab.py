"""The names users type for each concept, declared once as typed literals.

The schema's fields use these types; the registries that implement the names (advantage estimators, policy
losses, loss aggregation in `engine.algos`, loggers in `engine.loggers`) are checked against them by
`tests/unit/test_vocab.py`. To add a name: add it here, then register its implementation.
Torch-free and import-free: the config package depends on nothing else of the engine.
"""
from __future__ import annotations

import typing
from typing import Literal

AdvEstimator = Literal["gae", "grpo", "rloo", "reinforce_plus_plus", "reinforce_plus_plus_baseline", "remax"]
# estimators that compare the samples of one prompt, so they need rollout.n >= 2
GROUP_ESTIMATORS: frozenset[str] = frozenset({"grpo", "rloo", "reinforce_plus_plus_baseline"})

LossAggMode = Literal["token-mean", "token-sum", "seq-mean-token-sum", "seq-mean-token-mean",
                      "seq-mean-token-sum-norm"]

PolicyLossMode = Literal["vanilla", "gspo"]

# per-token KL estimators (Schulman's k1/k2/k3 with verl's names); "<kind>+" keeps the value of <kind> and takes
# k2's gradient. verl's "full" needs full-vocabulary logits: not offered.
KLEstimator = Literal["kl", "k1", "abs", "mse", "k2", "low_var_kl", "k3", "kl+", "k1+", "abs+", "mse+", "k2+",
                      "low_var_kl+", "k3+"]

LoggerName = Literal["console", "file", "wandb", "tensorboard", "mlflow", "dashboard"]


def names(vocabulary) -> tuple[str, ...]:
    """The names of a vocabulary literal, in declaration order."""
    return typing.get_args(vocabulary)
