"""python -m engine.bench.path_probe [--workload w2] [--rows 8] [--tf-len 128] [--gen-prompts 64] [--gen-n 2]
[--gen-len 256] [--out FILE] [key=value ...]

Numerics of every path that computes the same model's next-token distribution, in one process: the end-token
probability at the answer start and over a teacher-forced answer, and the per-token log-probs, from

- plain transformers (fp32 = the truth every other path is compared with; bf16; bf16 without cuBLAS's
  reduced-precision reductions), padded, one row at a time for fp32 too;
- the engine's reference module and actor module (one `TrainWorker` built from the workload's config, as
  `engine.bench` builds it): packed and padded, decoder layers compiled and eager, the actor also in train
  mode with autograd on (what the update sees), and the worker's own `compute_ref_log_prob` /
  `compute_log_prob` calls (auto micro-batching included);

and, for each decoder (the static decoder with CUDA graphs on/off and compile on/off, `generate` on the
actor, plain `generate` in bf16 and fp32), a histogram of sampled answer lengths plus a calibration check:
the number of answers that ended vs the number the fp32 model expects over the same tokens (the sum of its
end-token probabilities over the positions each answer ran for; equal in expectation when the decoder samples
from the fp32 model's distribution), and the mean |decoder log-prob − fp32 log-prob| of the sampled tokens.

One JSON line per path on stdout (and in --out); progress on stderr. Runs on CPU too (tiny workloads; the
GPU-only paths then coincide with the eager ones).
"""
from __future__ import annotations

import argparse
import json
import sys
import time

import torch


def _log(msg: str) -> None:
    print(f"[probe {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def teacher_batch(prompts, tf_len: int, vocab: int, eos: list[int], pad_id: int, seed: int = 0):
    """Prompts + a fixed answer of `tf_len` uniformly random tokens (no end token), in the training layout."""
    from engine.rollout.hf_rollout import assemble

    g = torch.Generator().manual_seed(seed)
    responses = torch.randint(0, vocab, (len(prompts), tf_len), generator=g)
    for e in eos:
        responses[responses == e] = (e + 1) % vocab
    return assemble(prompts, responses, eos, pad_id)


def padded_logits(model, mb) -> torch.Tensor:
    """[B, R, V] logits predicting each response token, through the engine's padded path."""
    from engine.workers.forward import response_logits

    return response_logits(model, mb, 1.0)


def packed_logits(model, mb) -> torch.Tensor:
    from engine.workers.forward import packed_response_logits

    logits, valid = packed_response_logits(model, mb)
    return logits.view(valid.shape[0], valid.shape[1], -1)  # every response token is valid here


def rowwise_logits(model, mb) -> torch.Tensor:
    """One row at a time without any padding (plain HF forward): no mask at all."""
    out = []
    resp = mb["responses"].shape[1]
    for r in range(len(mb)):
        valid = mb["attention_mask"][r].bool()
        ids = mb["input_ids"][r][valid][None]
        logits = model(input_ids=ids, use_cache=False).logits[0, -resp - 1:-1]
        out.append(logits)
    return torch.stack(out)


def summarize_logits(logits: torch.Tensor, labels: torch.Tensor, eos: int, truth: dict | None) -> dict:
    logp = torch.log_softmax(logits.float(), -1)
    p_eos = logp[..., eos].exp()
    lp = logp.gather(-1, labels[..., None]).squeeze(-1)
    rec = {"p_eos_start": round(float(p_eos[:, 0].mean()), 5), "p_eos_mean": round(float(p_eos.mean()), 5),
           "p_eos_start_rows": [round(float(x), 4) for x in p_eos[:, 0][:8]],
           "logit_mean": round(float(logits.float().mean()), 3),
           "eos_minus_mean": round(float((logits[..., eos].float() - logits.float().mean(-1)).mean()), 3),
           "lp_mean": round(float(lp.mean()), 4)}
    if truth is not None:
        t_logp = truth["logp"]
        rec["lp_absdiff_vs_fp32"] = round(float((lp - truth["lp"]).abs().mean()), 5)
        rec["lp_absdiff_max"] = round(float((lp - truth["lp"]).abs().max()), 4)
        kl = (t_logp.exp() * (t_logp - logp)).sum(-1)  # KL(fp32 || path) per position
        rec["kl_fp32_path_mean"] = float(f"{float(kl.mean()):.3e}")
    return rec, {"logp": logp, "lp": lp}


def hist(lengths: list[int], cap: int) -> dict:
    from engine.bench.workloads import length_histogram

    return length_histogram(lengths, cap)


@torch.no_grad()
def truth_eos_mass(model, batch, eos: list[int], micro: int = 16) -> tuple[float, int, float, list[float]]:
    """Σ over each answer's positions (up to and including its end token) of the fp32 model's end-token
    probability; the number of answers that ended; and mean |rollout lp - fp32 lp| where rollout lps exist."""
    from engine.workers.forward import response_logits

    mass, ended, diffs, starts = 0.0, 0, [], []
    for mb in batch.split(micro):
        logits = response_logits(model, mb, 1.0)
        logp = torch.log_softmax(logits.float(), -1)
        mask = mb["response_mask"].bool()
        p_end = sum(logp[..., e].exp() for e in eos)
        mass += float((p_end * mask).sum())
        starts += p_end[:, 0].tolist()
        is_eos = torch.zeros_like(mask)
        for e in eos:
            is_eos |= mb["responses"] == e
        ended += int((is_eos & mask).any(-1).sum())
        if "rollout_log_probs" in mb.tensors:
            lp = logp.gather(-1, mb["responses"][..., None]).squeeze(-1)
            diffs.append(float(((lp - mb["rollout_log_probs"].float()).abs() * mask).sum() / mask.sum()))
        del logits, logp
    return mass, ended, (sum(diffs) / len(diffs) if diffs else None), starts


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m engine.bench.path_probe", description=__doc__.split("\n")[0])
    p.add_argument("--workload", default="w2")
    p.add_argument("--rows", type=int, default=8, help="prompts for the teacher-forced comparisons")
    p.add_argument("--tf-len", type=int, default=128, help="teacher-forced answer tokens")
    p.add_argument("--gen-prompts", type=int, default=64)
    p.add_argument("--gen-n", type=int, default=2)
    p.add_argument("--gen-len", type=int, default=256, help="answer cap for the decoders")
    p.add_argument("--skip", default="", help="comma-separated path names to skip")
    p.add_argument("--out", default=None)
    p.add_argument("--gsm8k", default=None)
    p.add_argument("overrides", nargs="*")
    args = p.parse_args(argv)
    import os

    if args.gsm8k:
        os.environ["RLSTUDIO_GSM8K"] = args.gsm8k
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from engine.bench.engine_run import engine_overrides, make_prompts
    from engine.bench.workloads import WORKLOADS, model_dir
    from engine.config import build_config
    from engine.workers.launch import start_workers

    skip = set(filter(None, args.skip.split(",")))
    device = "cuda" if torch.cuda.is_available() else "cpu"
    w = WORKLOADS[args.workload]
    t0 = time.time()
    model = model_dir(w)
    _log(f"model {model} ready in {time.time() - t0:.0f}s")
    tok = AutoTokenizer.from_pretrained(model)
    results: list[dict] = []

    def emit(rec: dict) -> None:
        line = json.dumps(rec)
        print(line, flush=True)
        results.append(rec)
        if args.out:
            with open(args.out, "a", encoding="utf-8") as f:
                f.write(line + "\n")

    prompts_all = make_prompts(w, tok, seed=0)
    eos_list = [tok.convert_tokens_to_ids("<|im_end|>")]
    eos = eos_list[0]
    vocab = len(tok) if hasattr(tok, "__len__") else None
    from transformers import AutoConfig

    vocab = AutoConfig.from_pretrained(model).vocab_size
    tf = teacher_batch(prompts_all.slice(0, args.rows), args.tf_len, vocab, eos_list, tok.pad_token_id).to(device)
    labels = tf["responses"]
    emit({"path": "setup", "device": device, "prompt_lens": tf["attention_mask"][:, :-args.tf_len].sum(-1).tolist(),
          "eos": eos, "torch": torch.__version__,
          "gpu": torch.cuda.get_device_name(0) if device == "cuda" else "cpu"})

    def guarded(name: str, fn):
        if name in skip:
            return None
        start = time.time()
        try:
            out = fn()
            _log(f"{name}: {time.time() - start:.1f}s")
            return out
        except Exception as exc:  # noqa: BLE001 - one broken path must not hide the others
            import traceback

            traceback.print_exc()
            emit({"path": name, "error": f"{type(exc).__name__}: {exc}"[:500]})
            return None

    # ---- plain transformers ----------------------------------------------------------------------------
    with torch.no_grad():
        fp32 = AutoModelForCausalLM.from_pretrained(model, dtype=torch.float32, attn_implementation="sdpa").to(device)
        fp32.eval()
        logits = padded_logits(fp32, tf)
        rec, truth = summarize_logits(logits, labels, eos, None)
        emit({"path": "hf_fp32_padded", **rec})
        del logits

        def rowwise():
            rec, _ = summarize_logits(rowwise_logits(fp32, tf), labels, eos, truth)
            emit({"path": "hf_fp32_rowwise", **rec})
        guarded("hf_fp32_rowwise", rowwise)

        bf16 = AutoModelForCausalLM.from_pretrained(model, dtype=torch.bfloat16, attn_implementation="sdpa").to(device)
        bf16.eval()
        guarded("hf_bf16_padded", lambda: emit({"path": "hf_bf16_padded",
                                                **summarize_logits(padded_logits(bf16, tf), labels, eos, truth)[0]}))
        guarded("hf_bf16_rowwise", lambda: emit({"path": "hf_bf16_rowwise",
                                                 **summarize_logits(rowwise_logits(bf16, tf), labels, eos, truth)[0]}))
        if device == "cuda":
            def no_reduced():
                old = torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction
                torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False
                try:
                    emit({"path": "hf_bf16_padded_no_reduced_precision",
                          **summarize_logits(padded_logits(bf16, tf), labels, eos, truth)[0]})
                finally:
                    torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = old
            guarded("hf_bf16_no_reduced", no_reduced)

    # ---- the engine's worker ---------------------------------------------------------------------------
    cfg = build_config(engine_overrides(w, model, "grpo", 2, device) + list(args.overrides))
    workers = start_workers(cfg, 2, device)
    worker = workers.group.workers[0]
    emit({"path": "worker", "info": {k: v for k, v in workers.info.items() if k != "placement"},
          "remove_padding": cfg.actor_rollout_ref.model.use_remove_padding,
          "actor_ckpt": bool(getattr(worker.actor_module, "is_gradient_checkpointing", False))})
    from engine.workers.forward import response_log_probs

    def layers_eager(module, eager: bool):
        from engine.distributed.fsdp import decoder_layers

        saved = []
        for layer in decoder_layers(module):
            if eager and "forward" in layer.__dict__:
                saved.append((layer, layer.__dict__.pop("forward")))
        return saved

    def restore(saved):
        for layer, fwd in saved:
            layer.forward = fwd

    def module_paths(role: str, module, train: bool = False):
        for compiled in (True, False):
            for packed in (True, False):
                name = f"{role}_{'compiled' if compiled else 'eager'}_{'packed' if packed else 'padded'}" + \
                       ("_train" if train else "")

                def run(compiled=compiled, packed=packed, name=name):
                    saved = layers_eager(module, not compiled)
                    try:
                        module.train(train)
                        with torch.set_grad_enabled(train):
                            logits = (packed_logits if packed else padded_logits)(module, tf)
                            rec, _ = summarize_logits(logits.detach(), labels, eos, truth)
                            lp, _ = response_log_probs(module, tf, 1.0, remove_padding=packed)
                        rec["engine_lp_absdiff_vs_fp32"] = round(float((lp.detach() - truth["lp"]).abs().mean()), 5)
                        emit({"path": name, **rec})
                    finally:
                        module.eval()
                        restore(saved)
                guarded(name, run)

    module_paths("ref", worker.reference.module)
    module_paths("actor", worker.actor_module)
    module_paths("actor", worker.actor_module, train=True)

    def worker_calls():
        ref_out, _ = worker.compute_ref_log_prob(tf.cpu())
        act_out, _ = worker.compute_log_prob(tf.cpu())
        ref_lp, act_lp = ref_out["ref_log_prob"].to(device), act_out["old_log_probs"].to(device)
        d = act_lp - ref_lp
        emit({"path": "worker_calls", "ref_lp_absdiff_vs_fp32": round(float((ref_lp - truth["lp"]).abs().mean()), 5),
              "actor_lp_absdiff_vs_fp32": round(float((act_lp - truth["lp"]).abs().mean()), 5),
              "actor_vs_ref_k3": float(f"{float((torch.exp(-d) + d - 1).mean()):.3e}")})
    guarded("worker_calls", worker_calls)

    # ---- decoders --------------------------------------------------------------------------------------
    gen_prompts = make_prompts(w, tok, seed=0).slice(0, args.gen_prompts).repeat_interleave(args.gen_n).to(device)
    rollout = worker.rollout
    static = getattr(rollout, "static", None)

    def decode(name: str, gen):
        def run():
            torch.manual_seed(1234)
            start = time.time()
            batch = gen()
            if device == "cuda":
                torch.cuda.synchronize()
            seconds = time.time() - start
            lengths = batch["response_mask"].sum(-1).tolist()
            mass, ended, lp_diff, starts = truth_eos_mass(fp32, batch, eos_list)
            emit({"path": name, "seconds": round(seconds, 2), "lengths": hist(lengths, args.gen_len),
                  "ended": ended, "fp32_expected_ended": round(mass, 1),
                  "ended_over_expected": round(ended / mass, 3) if mass else None,
                  "fp32_p_eos_start": round(sum(starts) / len(starts), 5),
                  "rollout_lp_absdiff_vs_fp32": round(lp_diff, 5) if lp_diff is not None else None})
        guarded(name, run)

    def engine_generate():
        return rollout.generate(gen_prompts, max_new_tokens=args.gen_len)

    def plain_generate(model_):
        from engine.rollout.hf_rollout import assemble

        def gen():
            out = model_.generate(input_ids=gen_prompts["input_ids"], attention_mask=gen_prompts["attention_mask"],
                                  max_new_tokens=args.gen_len, do_sample=True, temperature=1.0, top_p=1.0, top_k=0,
                                  eos_token_id=eos_list, pad_token_id=tok.pad_token_id)
            resp = out[:, gen_prompts["input_ids"].shape[1]:]
            if resp.shape[1] < args.gen_len:
                resp = torch.nn.functional.pad(resp, (0, args.gen_len - resp.shape[1]), value=tok.pad_token_id)
            return assemble(gen_prompts, resp, eos_list, tok.pad_token_id)
        return gen

    if static is not None:
        decode("static_graphs_compiled", engine_generate)
        graphs = static.cuda_graphs
        static.cuda_graphs = False
        decode("static_eager_compiled", engine_generate)
        blocks, static._blocks = static._blocks, []
        decode("static_eager_nocompile", engine_generate)
        static.cuda_graphs = graphs
        decode("static_graphs_nocompile", engine_generate)
        static._blocks = blocks
        rollout.static = None
    decode("generate_actor", engine_generate)
    rollout.static = static
    with torch.no_grad():
        decode("generate_hf_bf16", plain_generate(bf16))
        decode("generate_hf_fp32", plain_generate(fp32))
    workers.stop()
    _log(f"done in {time.time() - t0:.0f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
