"""Server benchmarks, `python -m backend.bench --workload m1|samples`: `metrics` (M1: metric ingest and chart
queries, optionally against MLflow) and `samples` (S1: a GPU step's answers, storage, the Samples page)."""
