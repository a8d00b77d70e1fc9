"""A short-answer task a real 135M chat model is weak at but not hopeless on: "What number comes after 47?" -> "48",
asked in the model's chat template after two example turns (few-shot), so the answer is a bare number of 1-2 tokens
and CPU generation stays cheap. Rows in verl's schema, data_source "next_number" (scored by exact match, as arith).

    python -m engine.data.next_number --local_dir ~/data/next_number [--train_size 4000] [--test_size 200]

Why this task (docs/real-model.md has the measurements): SmolLM2-135M-Instruct answers two-digit sums correctly 0-2%
of the time at temperature 1 (GRPO finds no signal), but this question 35% (greedy 58%, 71% of 8 samples contain a
right one): weak when sampled, with room above it. Numbers run 10..998, so the held-out pool (one number in ten,
by a seeded hash, as engine/data/arith.py) has 99 questions none of which is trained on.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import numpy as np

from engine.data.files import DataError, write_parquet

DATA_SOURCE = "next_number"
LOW, HIGH = 10, 998  # the question's number; the answer is one more
TEST_BUCKETS = 10
# the two example turns every prompt starts with (their numbers are left out of both pools)
SHOTS = ((17, 18), (52, 53))
PARAMS_FILE = "params.json"
FORMAT_VERSION = 1


def question(n: int) -> str:
    return f"What number comes after {n}?"


def messages(n: int) -> list[dict]:
    shots = []
    for q, a in SHOTS:
        shots += [{"role": "user", "content": question(q)}, {"role": "assistant", "content": str(a)}]
    return shots + [{"role": "user", "content": question(n)}]


def _pools(seed: int) -> dict[str, np.ndarray]:
    numbers = np.array([n for n in range(LOW, HIGH + 1) if n not in {q for q, _ in SHOTS}], dtype=np.int64)
    # a seeded, stable split: one number in TEST_BUCKETS is held out
    key = np.random.default_rng([seed, 7]).permutation(len(numbers))
    test = np.sort(numbers[key % TEST_BUCKETS == 0])
    train = np.sort(numbers[key % TEST_BUCKETS != 0])
    return {"train": train, "test": test}


def make_rows(n: int, seed: int, split: str) -> list[dict]:
    """n rows of `split`; the training split cycles through its pool in a seeded order (questions repeat across
    epochs), the test split is each held-out number once (n at most the pool's size)."""
    pool = _pools(seed)[split]
    rng = np.random.default_rng([seed, 0 if split == "train" else 1])
    if split == "test":
        if n > len(pool):
            raise DataError(f"asked for {n} test questions but the held-out pool has {len(pool)}")
        chosen = rng.permutation(pool)[:n]
    else:
        chosen = np.concatenate([rng.permutation(pool) for _ in range(-(-n // len(pool)))])[:n]
    rows = []
    for index, number in enumerate(chosen.tolist()):
        answer = str(number + 1)
        rows.append({
            "data_source": DATA_SOURCE,
            "prompt": messages(number),
            "ability": "math",
            "reward_model": {"style": "rule", "ground_truth": answer},
            "extra_info": {"split": split, "index": index, "question": question(number), "answer": answer},
        })
    return rows


def prepare(local_dir: str | os.PathLike, train_size: int = 4000, test_size: int = 99, seed: int = 0,
            overwrite: bool = False) -> dict[str, Path]:
    """local_dir/{train,test}.parquet, rebuilt only when the parameters changed (kept in params.json, written last)."""
    local_dir = Path(os.path.expanduser(str(local_dir)))
    params = {"format_version": FORMAT_VERSION, "train_size": train_size, "test_size": test_size, "seed": seed}
    paths = {split: local_dir / f"{split}.parquet" for split in ("train", "test")}
    params_path = local_dir / PARAMS_FILE
    if not overwrite and params_path.is_file() and all(p.is_file() for p in paths.values()):
        try:
            if json.loads(params_path.read_text()) == params:
                return paths
        except json.JSONDecodeError:
            pass
    rows = {"train": make_rows(train_size, seed, "train"), "test": make_rows(test_size, seed, "test")}
    local_dir.mkdir(parents=True, exist_ok=True)
    params_path.unlink(missing_ok=True)
    for split, path in paths.items():
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        write_parquet(rows[split], tmp)
        os.replace(tmp, path)
    params_path.write_text(json.dumps(params, indent=1) + "\n")
    return paths


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m engine.data.next_number", description=__doc__.split("\n")[0])
    parser.add_argument("--local_dir", default="~/data/next_number")
    parser.add_argument("--train_size", type=int, default=4000)
    parser.add_argument("--test_size", type=int, default=99)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    try:
        paths = prepare(args.local_dir, args.train_size, args.test_size, args.seed, overwrite=True)
    except DataError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    for split, path in paths.items():
        print(f"wrote {split} rows to {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
