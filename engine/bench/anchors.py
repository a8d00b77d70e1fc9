"""The issue's plain-PyTorch anchors on the same workload, measured in the same process (`--anchors`):
`model.generate` (DynamicCache, sampling) of all responses, and bf16 forward + backward + fused AdamW over
all sequences in micro-batches. They bound what a trainer can get from plain transformers code."""
from __future__ import annotations

import time

import torch

from engine.bench.engine_run import ASCII_IDS
from engine.bench.workloads import Workload, model_dir, prompt_token_ids, sync


def run_anchors(w: Workload, device: str, log) -> dict:
    from transformers import AutoModelForCausalLM

    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    model = AutoModelForCausalLM.from_pretrained(model_dir(w), dtype=dtype, attn_implementation="sdpa").to(device)
    n_params = sum(p.numel() for p in model.parameters())
    prompts = prompt_token_ids(w, ASCII_IDS).repeat_interleave(w.n, dim=0).to(device)
    out = {}

    model.eval()
    with torch.no_grad():
        for rep in range(2):  # the first is warm-up
            sync(device)
            start = time.perf_counter()
            model.generate(input_ids=prompts, attention_mask=torch.ones_like(prompts), do_sample=True,
                           temperature=1.0, top_p=1.0, top_k=0, max_new_tokens=w.response_len,
                           min_new_tokens=w.response_len, pad_token_id=0)
            sync(device)
            gen = time.perf_counter() - start
    out["generate_s"] = gen
    out["generate_tokens_per_s"] = w.sequences * w.response_len / gen

    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-6, fused=device == "cuda")
    seqs = torch.randint(0, ASCII_IDS, (w.sequences, w.prompt_len + w.response_len), device=device)
    for rep in range(2):
        sync(device)
        start = time.perf_counter()
        for mb in seqs.split(w.micro):
            logits = model(input_ids=mb).logits
            loss = torch.nn.functional.cross_entropy(logits[:, :-1].flatten(0, 1).float(), mb[:, 1:].flatten())
            (loss / (w.sequences // w.micro)).backward()
            del logits, loss
        opt.step()
        opt.zero_grad(set_to_none=True)
        sync(device)
        train = time.perf_counter() - start
    tokens = seqs.numel()
    out["train_s"] = train
    out["train_tokens_per_s"] = tokens / train
    if device == "cuda":
        out["train_mfu"] = 6 * n_params * tokens / train / 989e12
    del model, opt
    if device == "cuda":
        torch.cuda.empty_cache()
    log({"event": "anchors", **{k: round(v, 4) for k, v in out.items()}})
    return out
