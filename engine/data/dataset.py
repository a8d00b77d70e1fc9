"""Prompt datasets for RL: rows (verl schema) -> templated, tokenized prompts -> left-padded Batches.

Rows follow verl's schema: `prompt` (chat messages, or a plain string), `data_source`,
`reward_model.ground_truth`, `extra_info`, `ability`. All prompts are templated and tokenized once at
construction, so length problems (overlong prompts) surface before training starts.
"""
from __future__ import annotations

import logging
import math
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import torch

from engine.data.files import DataError, as_path_list, read_file_rows, read_rows, to_plain
from engine.protocol import Batch

__all__ = ["DataError", "PromptLoader", "RLDataset", "collate", "read_rows"]

logger = logging.getLogger(__name__)

TRUNCATION_MODES = ("error", "left", "right", "middle")


def _messages(prompt: Any, where: str) -> list[dict]:
    """The prompt as chat messages; a plain string becomes one user message."""
    if isinstance(prompt, str):
        return [{"role": "user", "content": prompt}]
    if isinstance(prompt, dict):
        prompt = [prompt]
    if isinstance(prompt, list) and prompt and all(isinstance(m, dict) for m in prompt):
        # Arrow fills keys other rows have with None (e.g. tool_calls); templates test `is defined`, so drop them.
        return [{k: v for k, v in m.items() if v is not None or k in ("role", "content")} for m in prompt]
    raise DataError(f"{where}: prompt must be a string or a list of chat messages "
                    f"({{'role': ..., 'content': ...}}), got {type(prompt).__name__}: {str(prompt)[:200]}")


def _truncate(ids: list[int], max_len: int, mode: str) -> list[int]:
    if mode == "left":  # keep the end, where the question usually is
        return ids[-max_len:]
    if mode == "right":
        return ids[:max_len]
    head = max_len // 2  # middle: keep both ends
    return ids[:head] + ids[len(ids) - (max_len - head):]


class RLDataset:
    """Tokenized prompts with their reward metadata.

    `files`: one path or a list (parquet/jsonl). `rows`: alternatively, rows already in memory (e.g. from
    pandas; numpy arrays inside are converted). Items are dicts: `input_ids` (list[int]) plus the meta
    columns data_source, ground_truth, raw_prompt, prompt_text, extra_info, ability, prompt_index,
    reward_style (and the `reward_fn_key` column when it is not data_source).
    """

    def __init__(self, files, tokenizer, prompt_key: str = "prompt", max_prompt_length: int = 512,
                 truncation: str = "error", filter_overlong_prompts: bool = False,
                 reward_fn_key: str = "data_source", chat_template: str | None = None,
                 apply_chat_template: bool = True, rows: Sequence[dict] | None = None, return_raw_chat: bool = True):
        if truncation not in TRUNCATION_MODES:
            raise DataError(f"data.truncation={truncation!r} is not one of {list(TRUNCATION_MODES)}")
        if max_prompt_length is None or int(max_prompt_length) <= 0:
            raise DataError(f"data.max_prompt_length must be a positive integer, got {max_prompt_length!r}")
        self.tokenizer = tokenizer
        self.prompt_key = prompt_key
        self.max_prompt_length = int(max_prompt_length)
        self.truncation = truncation
        self.filter_overlong_prompts = filter_overlong_prompts
        self.reward_fn_key = reward_fn_key
        self.chat_template = chat_template
        self.apply_chat_template = apply_chat_template
        self.return_raw_chat = return_raw_chat  # keep the chat messages (meta `raw_prompt`) in the batches
        if apply_chat_template and chat_template is None and not getattr(tokenizer, "chat_template", None):
            raise DataError("the tokenizer has no chat template; pass a chat template string (chat_template=...) "
                            "or set data.apply_chat_template=False to tokenize the raw prompt text")

        # (row, source name) pairs; the position in this list is the fallback prompt_index.
        sourced: list[tuple[dict, str]] = []
        if rows is not None:
            sourced = [(to_plain(dict(r)), "<rows>") for r in rows]
        else:
            if files is None:
                raise DataError("RLDataset needs data files (data.train_files / data.val_files) or rows")
            for path in as_path_list(files):
                sourced.extend((to_plain(r), str(path)) for r in read_file_rows(path))
        self._check_prompt_column(sourced)

        texts = [self._template(row[prompt_key], f"row {i} of {src}") for i, (row, src) in enumerate(sourced)]
        add_special = not apply_chat_template  # templates already contain BOS etc.; don't add them twice
        all_ids = tokenizer(texts, add_special_tokens=add_special)["input_ids"] if texts else []

        self.items: list[dict] = []
        self.num_filtered = 0
        self.num_truncated = 0
        for i, ((row, src), text, ids) in enumerate(zip(sourced, texts, all_ids)):
            ids = list(ids)
            if len(ids) > self.max_prompt_length:
                if filter_overlong_prompts:
                    self.num_filtered += 1
                    continue
                if truncation == "error":
                    raise DataError(
                        f"prompt of row {i} ({src}) has {len(ids)} tokens > data.max_prompt_length="
                        f"{self.max_prompt_length}. Fix: raise data.max_prompt_length, or set "
                        "data.filter_overlong_prompts=True to drop such prompts, or data.truncation=left "
                        "(or right/middle) to cut them")
                ids = _truncate(ids, self.max_prompt_length, truncation)
                self.num_truncated += 1
            self.items.append(self._item(i, row, text, ids))
        if self.num_filtered:
            logger.warning("filtered %d of %d prompts longer than data.max_prompt_length=%d",
                           self.num_filtered, len(sourced), self.max_prompt_length)
        if not self.items:
            raise DataError(f"no prompts left in {files if rows is None else '<rows>'} "
                            f"({len(sourced)} rows, {self.num_filtered} filtered as overlong)")

    # ---- construction helpers ----------------------------------------------------------------------
    def _check_prompt_column(self, sourced: list[tuple[dict, str]]) -> None:
        for i, (row, src) in enumerate(sourced):
            if self.prompt_key not in row:
                raise DataError(
                    f"prompt column {self.prompt_key!r} not found in {src} (row {i}); columns present: "
                    f"{sorted(row)}. Set data.prompt_key=<column> to the column that holds the prompt")

    def _template(self, prompt: Any, where: str) -> str:
        messages = _messages(prompt, where)
        if not self.apply_chat_template:
            return prompt if isinstance(prompt, str) else "\n".join(str(m.get("content") or "") for m in messages)
        return self.tokenizer.apply_chat_template(messages, chat_template=self.chat_template,
                                                  add_generation_prompt=True, tokenize=False)

    def _item(self, position: int, row: dict, text: str, ids: list[int]) -> dict:
        reward_model = row.get("reward_model")
        reward_model = reward_model if isinstance(reward_model, dict) else {}
        extra_info = row.get("extra_info")
        extra_info = extra_info if isinstance(extra_info, dict) else {}
        index = extra_info.get("index")
        # extra_info.index is stable across runs and file re-orderings; the row position is the fallback.
        prompt_index = int(index) if isinstance(index, (int, float)) and not math.isnan(index) else position
        item = {
            "input_ids": ids,
            "data_source": row.get("data_source"),
            "ground_truth": reward_model.get("ground_truth"),
            "prompt_text": text,
            "extra_info": extra_info,
            "ability": row.get("ability"),
            "prompt_index": prompt_index,
            "reward_style": reward_model.get("style"),
        }
        if self.return_raw_chat:
            item["raw_prompt"] = _messages(row[self.prompt_key], "")
        if self.reward_fn_key != "data_source":
            item[self.reward_fn_key] = row.get(self.reward_fn_key)
        return item

    # ---- access ------------------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int) -> dict:
        return self.items[i]

    @property
    def pad_token_id(self) -> int:
        pad = getattr(self.tokenizer, "pad_token_id", None)
        if pad is None:
            pad = getattr(self.tokenizer, "eos_token_id", None)
        if pad is None:
            raise DataError("the tokenizer has neither a pad token nor an eos token to pad prompts with")
        return int(pad)


def collate(items: Sequence[dict], pad_token_id: int, pad_to: int | None = None) -> Batch:
    """Left-pads prompts to the longest (or `pad_to`) so generation continues right after each prompt."""
    if not items:
        raise DataError("collate() got no items")
    longest = max(len(it["input_ids"]) for it in items)
    width = longest if pad_to is None else int(pad_to)
    if width < longest:
        raise DataError(f"pad_to={pad_to} is shorter than the longest prompt in the batch ({longest} tokens)")
    input_ids = torch.full((len(items), width), int(pad_token_id), dtype=torch.long)
    attention_mask = torch.zeros((len(items), width), dtype=torch.long)
    for r, it in enumerate(items):
        n = len(it["input_ids"])
        if n:
            input_ids[r, width - n:] = torch.as_tensor(it["input_ids"], dtype=torch.long)
            attention_mask[r, width - n:] = 1
    position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)
    meta_keys = [k for k in items[0] if k != "input_ids"]
    meta = {k: [it.get(k) for it in items] for k in meta_keys}
    return Batch({"input_ids": input_ids, "attention_mask": attention_mask, "position_ids": position_ids}, meta)


class PromptLoader:
    """Batches of prompts over epochs with an exact, resumable position.

    `next(loader)` streams batches forever, rolling into the next epoch; `for batch in loader` yields the
    rest of the current epoch (starting the next one if the current is finished). Epoch e's order is a
    permutation drawn from (seed, e) alone, so a loader restored with `load_state_dict` continues with
    exactly the batches an uninterrupted run would have produced.
    """

    def __init__(self, dataset, batch_size: int, shuffle: bool = True, seed: int = 1, drop_last: bool = True,
                 pad_to: int | None = None):
        self.dataset = dataset
        self.batch_size = int(batch_size)
        self.shuffle = shuffle
        self.seed = int(seed)
        self.drop_last = drop_last
        self.pad_to = pad_to
        n = len(dataset)
        if self.batch_size <= 0:
            raise DataError(f"data.train_batch_size must be positive, got {batch_size}")
        if self.batch_size > n:
            raise DataError(f"data.train_batch_size={self.batch_size} is larger than the dataset ({n} prompts); "
                            "lower data.train_batch_size or use more data")
        self.epoch = 0
        self.position = 0  # batches of `epoch` already handed out
        self._order_epoch: int | None = None
        self._order: np.ndarray | None = None

    def __len__(self) -> int:
        n = len(self.dataset)
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)

    @property
    def steps_per_epoch(self) -> int:
        return len(self)

    def order(self, epoch: int) -> np.ndarray:
        """Dataset indices in epoch `epoch`'s order."""
        if self._order_epoch != epoch:
            n = len(self.dataset)
            self._order = (np.random.default_rng([self.seed, epoch]).permutation(n) if self.shuffle
                           else np.arange(n))
            self._order_epoch = epoch
        return self._order

    def _batch_at(self, epoch: int, position: int) -> Batch:
        idx = self.order(epoch)[position * self.batch_size:(position + 1) * self.batch_size]
        return collate([self.dataset[int(i)] for i in idx], self.dataset.pad_token_id, self.pad_to)

    def __next__(self) -> Batch:
        if self.position >= len(self):  # epoch finished (also right after resuming at its end)
            self.epoch += 1
            self.position = 0
        batch = self._batch_at(self.epoch, self.position)
        self.position += 1
        batch.info.update(epoch=self.epoch, batch_in_epoch=self.position - 1)
        return batch

    def next_batch(self) -> Batch:
        return next(self)

    def __iter__(self) -> Iterator[Batch]:
        yield next(self)
        while self.position < len(self):
            yield next(self)

    def state_dict(self) -> dict:
        return {"epoch": self.epoch, "position": self.position}

    def load_state_dict(self, state: dict) -> None:
        epoch, position = int(state["epoch"]), int(state["position"])
        if epoch < 0 or not 0 <= position <= len(self):
            raise DataError(f"loader state {state} does not fit this loader ({len(self)} batches per epoch); "
                            "was the checkpoint made with another dataset or data.train_batch_size?")
        self.epoch, self.position = epoch, position

