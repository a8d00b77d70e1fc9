from __future__ import annotations

from fastapi import APIRouter, Request
from sqlalchemy import text
from sqlmodel import Session, SQLModel

router = APIRouter(tags=["health"])


class Health(SQLModel):
    status: str
    database: str
    dispatch: str
    version: str


def health_of(request: Request) -> Health:
    from importlib.metadata import PackageNotFoundError, version

    try:
        with Session(request.app.state.engine) as session:
            session.exec(text("SELECT 1"))
        database = "ok"
    except Exception as exc:  # noqa: BLE001 - reported, not raised
        database = f"error: {type(exc).__name__}"
    dispatcher = getattr(request.app.state, "dispatcher", None)
    dispatch = dispatcher.describe() if dispatcher is not None else "off"
    try:
        ver = version("rlstudio")
    except PackageNotFoundError:
        ver = "unknown"
    return Health(status="ok" if database == "ok" else "degraded", database=database, dispatch=dispatch, version=ver)


@router.get("/health", response_model=Health)
def get_health(request: Request):
    return health_of(request)
