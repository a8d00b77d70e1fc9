"""`python -m engine.config --json-schema` prints the run-config JSON Schema; `python -m engine.config
[--config-name NAME] [key=value ...]` prints the resolved config (or the error): a file of it runs as it is with
`python -m engine.main_ppo --config-file FILE`."""
import argparse
import json
import sys

from engine.config import ConfigError, build_config, json_schema


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m engine.config")
    parser.add_argument("--json-schema", action="store_true", help="print the JSON Schema of the run config")
    parser.add_argument("--config-name", default=None)
    parser.add_argument("overrides", nargs="*", help="key=value overrides; prints the resolved config")
    args = parser.parse_args(argv)
    if args.json_schema:
        print(json.dumps(json_schema(), indent=2))
        return 0
    try:
        cfg = build_config(args.overrides, config_name=args.config_name)
    except ConfigError as exc:
        print(f"Config error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(cfg.model_dump(mode="json"), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
