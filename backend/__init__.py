"""rlstudio's experiment service: FastAPI + SQLModel, runs launched as Ray jobs, live over SSE.

Layout: `settings` (one pydantic-settings class), `db` (engine, sessions, migrations on start),
`models/` (one module per resource, template families Base/Create/Update/table/Public),
`api/routes/` (one router per resource under /api/v1), `services/` (ingest, queries, events, Ray dispatch).
"""
