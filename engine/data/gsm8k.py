"""GSM8K -> train/test parquet in verl's row schema.

    python -m engine.data.gsm8k --local_dir ~/data/gsm8k                 # via the `datasets` library
    python -m engine.data.gsm8k --local_dir ~/data/gsm8k --input DIR     # DIR holds train.jsonl and test.jsonl

Each row: data_source="openai/gsm8k", prompt=[{"role": "user", "content": question + instruction}],
ability="math", reward_model={"style": "rule", "ground_truth": final answer}, extra_info={split, index,
answer, question}.
"""
from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterable
from pathlib import Path

from engine.data.files import DataError, read_file_rows, write_parquet

DATA_SOURCE = "openai/gsm8k"
INSTRUCTION = 'Let\'s think step by step and output the final answer after "####".'
SPLITS = ("train", "test")
LOCAL_ENV = "RLSTUDIO_GSM8K"  # a directory holding GSM8K's train.jsonl and test.jsonl
_CHECKOUT = Path(__file__).resolve().parents[2]


def _local_candidates() -> list[Path]:
    if os.environ.get(LOCAL_ENV):
        return [Path(os.path.expanduser(os.environ[LOCAL_ENV]))]
    # shared/data/gsm8k in the checkout, beside it, or beside its folder (a clone of the checkout inside a folder)
    return [base / "shared" / "data" / "gsm8k" for base in (_CHECKOUT, _CHECKOUT.parent, _CHECKOUT.parent.parent)]


def local_dir(files: Iterable[str] = ("train.jsonl", "test.jsonl")) -> Path | None:
    """The directory of a local copy of GSM8K's jsonl files (what `--input` takes): $RLSTUDIO_GSM8K when set,
    else shared/data/gsm8k in or beside the checkout; None when none of them holds all of `files`."""
    files = tuple(files)
    return next((d for d in _local_candidates() if all((d / f).is_file() for f in files)), None)


def local_dir_missing(files: Iterable[str] = ("train.jsonl", "test.jsonl")) -> str:
    """Why `local_dir(files)` found nothing, and the fix (for skip reasons and fallbacks)."""
    where = ", ".join(str(d) for d in _local_candidates())
    return (f"GSM8K's {' and '.join(files)} not found (looked in {where}): set {LOCAL_ENV} to the directory of "
            "GSM8K's jsonl files, or put them at shared/data/gsm8k beside the checkout")


def extract_ground_truth(answer: str) -> str:
    """The final answer of a GSM8K solution: the text after "####", commas removed, stripped."""
    if "####" not in answer:
        raise DataError(f"GSM8K answer has no '####' final-answer marker: {answer[-200:]!r}")
    return answer.split("####")[-1].replace(",", "").strip()


def make_row(example: dict, split: str, index: int) -> dict:
    question, answer = example.get("question"), example.get("answer")
    if not isinstance(question, str) or not isinstance(answer, str):
        raise DataError(f"{split} example {index} needs string fields 'question' and 'answer'; "
                        f"it has {sorted(example)}")
    return {
        "data_source": DATA_SOURCE,
        "prompt": [{"role": "user", "content": question + " " + INSTRUCTION}],
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": extract_ground_truth(answer)},
        "extra_info": {"split": split, "index": index, "answer": answer, "question": question},
    }


def make_rows(examples: Iterable[dict], split: str) -> list[dict]:
    return [make_row(ex, split, i) for i, ex in enumerate(examples)]


def load_examples_from_dir(input_dir: str | os.PathLike) -> dict[str, list[dict]]:
    input_dir = Path(os.path.expanduser(str(input_dir)))
    if not input_dir.is_dir():
        raise DataError(f"--input directory not found: {input_dir} (it must hold train.jsonl and test.jsonl)")
    out = {}
    for split in SPLITS:
        path = input_dir / f"{split}.jsonl"
        if not path.is_file():
            raise DataError(f"missing {path}: --input must hold train.jsonl and test.jsonl "
                            "(GSM8K lines with 'question' and 'answer')")
        out[split] = read_file_rows(path)
    return out


def load_examples_from_hub() -> dict[str, list[dict]]:
    try:
        import datasets  # optional dependency; only this path needs it
    except ImportError:
        raise DataError("the `datasets` package is not installed, so openai/gsm8k cannot be downloaded; "
                        "pass --input DIR with GSM8K's train.jsonl and test.jsonl instead")
    try:
        ds = datasets.load_dataset("openai/gsm8k", "main")
    except Exception as e:  # noqa: BLE001 - network/cache failures of any kind: point at the offline route
        raise DataError(f"loading openai/gsm8k through `datasets` failed ({type(e).__name__}: {e}); "
                        "pass --input DIR with train.jsonl and test.jsonl instead")
    return {split: list(ds[split]) for split in SPLITS}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m engine.data.gsm8k", description=__doc__.split("\n")[0])
    parser.add_argument("--local_dir", default="~/data/gsm8k", help="output directory for {train,test}.parquet")
    parser.add_argument("--input", default=None, help="directory with train.jsonl and test.jsonl (offline)")
    args = parser.parse_args(argv)
    try:
        examples = load_examples_from_dir(args.input) if args.input else load_examples_from_hub()
        local_dir = Path(os.path.expanduser(args.local_dir))
        for split in SPLITS:
            path = write_parquet(make_rows(examples[split], split), local_dir / f"{split}.parquet")
            print(f"wrote {len(examples[split])} rows to {path}")
    except (DataError, FileNotFoundError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
