"""Synthetic arithmetic ("82+53=?" -> "135") as train/test parquet in verl's row schema.

    python -m engine.data.arith --local_dir ~/data/arith [--train_size 14000] [--test_size 1000] [--seed 0]

Each row: data_source="arith", prompt=[{"role": "user", "content": "82+53=?"}], ability="math",
reward_model={"style": "rule", "ground_truth": "135"}, extra_info={split, index, question, answer}.

Splits are disjoint by construction: a seeded hash puts every possible question into the test pool (one in
ten) or the train pool, and each split draws only from its own pool. Rows are deterministic by seed, and the
rows for n are a prefix of the rows for any larger n.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import numpy as np

from engine.data.files import DataError, write_parquet

DATA_SOURCE = "arith"
SPLITS = ("train", "test")
SUPPORTED_OPS = "+-*"
TEST_BUCKETS = 10  # one question in TEST_BUCKETS belongs to the test pool
PARAMS_FILE = "arith_params.json"
FORMAT_VERSION = 1  # bump when the generated rows change for the same parameters
_ENUMERATE_LIMIT = 1 << 22  # larger question spaces are sampled instead of enumerated
_SAMPLE_BATCH = 1 << 16


def _mix64(x: np.ndarray) -> np.ndarray:
    """splitmix64 finalizer: a fixed, platform-independent hash of uint64 values (wraps on overflow)."""
    x = x.astype(np.uint64)
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def _check_params(seed: int, max_operand: int, ops: str, min_operand: int) -> str:
    if not ops or any(op not in SUPPORTED_OPS for op in ops):
        raise DataError(f"ops must be a non-empty string of {SUPPORTED_OPS!r}, got {ops!r}")
    if min_operand < 0 or max_operand < min_operand:
        raise DataError(f"need 0 <= min_operand <= max_operand, got {min_operand}..{max_operand}")
    if seed < 0:
        raise DataError(f"seed must be >= 0, got {seed}")
    return "".join(dict.fromkeys(ops))  # drop repeats, keep order


def _in_test_pool(indices: np.ndarray, seed: int) -> np.ndarray:
    key = _mix64(np.array([seed], dtype=np.uint64) + np.uint64(0x9E3779B97F4A7C15))[0]  # seed-dependent pools
    return _mix64(indices.astype(np.uint64) ^ key) % np.uint64(TEST_BUCKETS) == 0


def _pool_indices(n: int, seed: int, split: str, space: int) -> np.ndarray:
    """The first n question indices of a split's pool, in the split's seeded order."""
    want_test = split == "test"
    rng = np.random.default_rng([seed, SPLITS.index(split)])
    if space <= _ENUMERATE_LIMIT:
        all_indices = np.arange(space, dtype=np.int64)
        pool = all_indices[_in_test_pool(all_indices, seed) == want_test]
        if n > len(pool):
            raise DataError(f"asked for {n} {split} questions but only {len(pool)} exist for these settings; "
                            "raise max_operand, add ops or ask for fewer rows")
        return rng.permutation(pool)[:n]
    # Huge spaces: draw uniformly, keep the split's pool, drop repeats. A fixed batch size keeps the
    # stream (and so the prefix property) independent of n.
    chosen: dict[int, None] = {}
    while len(chosen) < n:
        batch = rng.integers(0, space, size=_SAMPLE_BATCH, dtype=np.int64)
        for idx in batch[_in_test_pool(batch, seed) == want_test].tolist():
            chosen.setdefault(idx)
            if len(chosen) == n:
                break
    return np.fromiter(chosen, dtype=np.int64, count=n)


def _apply(a: int, op: str, b: int) -> int:
    return a + b if op == "+" else a - b if op == "-" else a * b


def make_arith_rows(n: int, seed: int, split: str, max_operand: int = 99, ops: str = "+-",
                    min_operand: int = 10, data_source: str = DATA_SOURCE) -> list[dict]:
    """n rows of `split` ("train" or "test"); questions "a<op>b=?" with operands in [min_operand, max_operand].
    `data_source` picks the reward: "arith" (the answer alone) or "arith_tool" (the answer after tool calls)."""
    if split not in SPLITS:
        raise DataError(f"split must be one of {SPLITS}, got {split!r}")
    if n < 0:
        raise DataError(f"n must be >= 0, got {n}")
    ops = _check_params(seed, max_operand, ops, min_operand)
    width = max_operand - min_operand + 1
    space = width * width * len(ops)
    rows = []
    # index -> (a, b, op): op varies fastest, then b, then a
    for index, q in enumerate(_pool_indices(n, seed, split, space).tolist()):
        op = ops[q % len(ops)]
        a, b = divmod(q // len(ops), width)
        a, b = a + min_operand, b + min_operand
        question, answer = f"{a}{op}{b}=?", str(_apply(a, op, b))
        rows.append({
            "data_source": data_source,
            "prompt": [{"role": "user", "content": question}],
            "ability": "math",
            "reward_model": {"style": "rule", "ground_truth": answer},
            "extra_info": {"split": split, "index": index, "question": question, "answer": answer},
        })
    return rows


def prepare_arith(local_dir: str | os.PathLike, train_size: int = 14000, test_size: int = 1000, seed: int = 0,
                  max_operand: int = 99, ops: str = "+-", min_operand: int = 10,
                  overwrite: bool = False, data_source: str = DATA_SOURCE) -> dict[str, Path]:
    """Writes local_dir/{train,test}.parquet unless they already exist for the same parameters.

    The parameters are kept in local_dir/arith_params.json, written last, so a half-written directory is
    rebuilt on the next call. Returns {"train": path, "test": path}.
    """
    local_dir = Path(os.path.expanduser(str(local_dir)))
    params = {"format_version": FORMAT_VERSION, "train_size": train_size, "test_size": test_size, "seed": seed,
              "max_operand": max_operand, "ops": ops, "min_operand": min_operand}
    if data_source != DATA_SOURCE:  # kept out of the default's params, so existing caches stay valid
        params["data_source"] = data_source
    paths = {split: local_dir / f"{split}.parquet" for split in SPLITS}
    params_path = local_dir / PARAMS_FILE
    if not overwrite and all(p.is_file() for p in paths.values()) and params_path.is_file():
        try:
            if json.loads(params_path.read_text()) == params:
                return paths
        except json.JSONDecodeError:
            pass  # unreadable: rebuild
    sizes = {"train": train_size, "test": test_size}
    rows = {split: make_arith_rows(sizes[split], seed, split, max_operand, ops, min_operand, data_source)
            for split in SPLITS}
    params_path.unlink(missing_ok=True)
    for split in SPLITS:
        # write then rename, so a reader never sees a partial file
        tmp = paths[split].with_name(f".{paths[split].name}.{os.getpid()}.tmp")
        write_parquet(rows[split], tmp)
        os.replace(tmp, paths[split])
    params_path.write_text(json.dumps(params, indent=1) + "\n")
    return paths


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m engine.data.arith", description=__doc__.split("\n")[0])
    parser.add_argument("--local_dir", default="~/data/arith", help="output directory for {train,test}.parquet")
    parser.add_argument("--train_size", type=int, default=14000)
    parser.add_argument("--test_size", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max_operand", type=int, default=99)
    parser.add_argument("--min_operand", type=int, default=10)
    parser.add_argument("--ops", default="+-", help=f"operators to use, a subset of {SUPPORTED_OPS!r}")
    args = parser.parse_args(argv)
    try:
        paths = prepare_arith(args.local_dir, args.train_size, args.test_size, args.seed, args.max_operand,
                              args.ops, args.min_operand, overwrite=True)
    except DataError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    for split, path in paths.items():
        print(f"wrote {args.train_size if split == 'train' else args.test_size} {split} rows to {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
