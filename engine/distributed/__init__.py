"""Running over data-parallel workers: FSDP2 sharding of a model (fsdp.py) and the worker groups the driver calls
as one object (worker_group.py: split a batch, join the results; in this process or as Ray actors,
ray_worker_group.py). Below the roles and the rollout: it knows none of them."""
