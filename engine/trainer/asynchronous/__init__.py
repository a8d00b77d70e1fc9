"""verl 0.9's asynchronous v1 trainer modes (colocate_async, separate_async): the design is engine/trainer/ASYNC.md.

`staleness` (how far ahead the rollout may run, which groups are too stale), `versions` (each token's policy
version and verl's off-policy metrics) are pure; `driver` runs the rollout ahead of the update.
"""
