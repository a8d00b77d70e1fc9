"""verl 0.9's asynchronous v1 trainer modes (colocate_async, separate_async): the design is engine/trainer/ASYNC.md.

`staleness` (how far ahead the rollout may run, which groups are too stale) is pure; `driver` runs the rollout ahead
of the update and hands the trainer its batches (`AsyncBatches`); `carry` keeps slow groups in flight across steps.
The behaviour copy the rollout samples with lives on the workers (engine/workers/behaviour/).
"""
