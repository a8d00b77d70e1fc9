from __future__ import annotations

from typing import Any

from fastapi import APIRouter, HTTPException, status
from sqlmodel import Field, SQLModel

from backend.api.errors import validated_config
from backend.services import run_config
from backend.services.run_config import RunConfigError

router = APIRouter(prefix="/config", tags=["config"])


class Preset(SQLModel):
    name: str
    config: dict[str, Any]


class Presets(SQLModel):
    data: list[Preset]
    count: int
    demo: str | None = Field(default=None, description="The first demo: the preset `python -m backend --demo` launches "
                             "and the New run form opens on (None when it is not shipped).")


class ConfigCheck(SQLModel):
    preset: str | None = Field(default=None, max_length=100)
    config: dict[str, Any] = Field(default_factory=dict)
    overrides: list[str] = Field(default_factory=list)


class ConfigChecked(SQLModel):
    config: dict[str, Any]
    resolved_config: dict[str, Any]


@router.get("/schema")
def get_config_schema() -> dict[str, Any]:
    """The engine's run-config JSON Schema (the one the API validates with and the UI builds its form from)."""
    from engine.config import json_schema

    return json_schema()


@router.get("/presets", response_model=Presets)
def list_presets():
    """Named configs shipped with the engine (engine/configs/*.yaml)."""
    data = [Preset(name=name, config=run_config.load_preset(name)) for name in run_config.preset_names()]
    demo = run_config.DEMO_PRESET if run_config.DEMO_PRESET in run_config.preset_names() else None
    return Presets(data=data, count=len(data), demo=demo)


@router.get("/presets/{name}", response_model=Preset)
def get_preset(name: str):
    try:
        return Preset(name=name, config=run_config.load_preset(name))
    except RunConfigError as exc:
        raise HTTPException(status.HTTP_404_NOT_FOUND, exc.message) from None


@router.post("/validate", response_model=ConfigChecked)
def validate_config(body: ConfigCheck):
    """Check a config without creating a run: the resolved config, or a 422 naming the key."""
    tree, resolved = validated_config(body.preset, body.config, body.overrides)
    return ConfigChecked(config=tree, resolved_config=resolved)
