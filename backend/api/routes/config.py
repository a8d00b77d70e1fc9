from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import StringConstraints

from fastapi import APIRouter, HTTPException, status
from sqlmodel import Field, SQLModel

from backend.api.errors import validated_config
from backend.models.run import CONFIG_WORDS, Override, preset_field
from backend.services import run_config
from backend.services.run_config import RunConfigError
from engine.config import command_text

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
    preset: str | None = preset_field()
    config: dict[str, Any] = Field(default_factory=dict, description=CONFIG_WORDS)
    overrides: list[Override] = Field(default_factory=list)


class ConfigChecked(SQLModel):
    config: dict[str, Any]
    resolved_config: dict[str, Any]


class CommandText(SQLModel):
    command: str = Field(max_length=200_000, description="A command line as pasted: `[VAR=v] python -m "
                         "verl.trainer.main_ppo [--config-name NAME] key=value ...`, or bare `key=value` lines.")


ValueText = Annotated[str, StringConstraints(max_length=10_000)]  # 200 of these stay under the body limit (2 MB)


class ValueTexts(SQLModel):
    texts: list[ValueText] = Field(max_length=200, description="Values as typed after `key=`, e.g. `[q_proj, v_proj]`.")


class ValueRead(SQLModel):
    text: str
    value: Any = Field(description="what the engine's override grammar reads the text as (a text it does not read "
                       "as anything else is that string)")


class ValuesRead(SQLModel):
    values: list[ValueRead]


class CommandValues(SQLModel):
    values: dict[str, Any] = Field(description="dotted key -> value, in the order the command lists them")
    config_name: str | None = Field(default=None, max_length=200, description="a preset, written as `--config-name`")


class CommandLine(SQLModel):
    command: str = Field(description="`python -m engine.main_ppo [--config-name NAME] key=value ...`, one per line, "
                         "ready for a shell")


class ParsedOverride(SQLModel):
    op: Literal["set", "add", "force", "delete"] = Field(description="key=v, +key=v, ++key=v, ~key")
    key: str = Field(description="the key in the canonical layout (verl 0.9's spelling mapped)")
    value: Any = Field(default=None, description="the value as the engine's override grammar reads it")
    raw: str = Field(description="the token as written")


class ParsedCommand(SQLModel):
    module: str | None = Field(description="`-m MODULE` or the script; None for bare overrides")
    config_name: str | None
    env: dict[str, str] = Field(description="leading VAR=value assignments")
    overrides: list[ParsedOverride]
    values: dict[str, Any] = Field(description="key -> value of the set/add/force overrides, a later one winning")
    deleted: list[str]
    ignored: list[str] = Field(description="tokens that are neither the program, its flags nor an override")


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


@router.post("/parse", response_model=ParsedCommand)
def parse_command(body: CommandText):
    """A pasted command line parsed as the engine parses its arguments (the New run form fills itself from it)."""
    return run_config.parse_command(body.command)


@router.post("/validate", response_model=ConfigChecked)
def validate_config(body: ConfigCheck):
    """Check a config without creating a run: the resolved config, or a 422 naming the key."""
    tree, resolved = validated_config(body.preset, body.config, body.overrides)
    return ConfigChecked(config=tree, resolved_config=resolved)


@router.post("/values", response_model=ValuesRead)
def read_values(body: ValueTexts):
    """Typed values read by the engine's one override grammar (the New run form has no grammar of its own)."""
    return ValuesRead(values=[ValueRead(text=text, value=run_config.read_value(text)) for text in body.texts])


@router.post("/command", response_model=CommandLine)
def write_command(body: CommandValues):
    """Values written back as the command line that runs them (the New run form's "As a command")."""
    return CommandLine(command=command_text(body.values, body.config_name))
