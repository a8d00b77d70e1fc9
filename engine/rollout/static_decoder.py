"""Fast HF-backend decoding: a static KV cache, one CUDA graph for the decode step, sampling inside the graph.

`transformers.generate` with a DynamicCache spends most of its time outside the GPU's arithmetic: the cache
grows by concatenation (every step copies it), every one of the ~800 kernels of a decode step is launched
from Python, and the logits processors run one by one. Here:

- the weights are the actor's own: a hook-free "twin" module (built once on the meta device) whose
  parameters and buffers *are* the FSDP module's gathered tensors (no copy, no weight sync); it only
  exists so that the decode step has no FSDP hooks in it and can be captured;
- the cache is transformers' `StaticCache` (fixed [B, prompt + response] buffers, written in place);
- attention is called with a ready 4-D boolean mask; a decode step (one query per sequence) attends with
  grouped-query matmuls that read each KV head once (SDPA with a mask would first repeat the KV heads ×7
  for Qwen2.5-0.5B); prefill uses SDPA;
- sampling is Gumbel-max (argmax of log p − log E, E ~ Exp(1)), the same distribution as multinomial,
  with temperature / top-k / top-p / min_new_tokens as tensor ops, so the whole step — forward, sampling,
  the token's log-prob, end-of-sequence tracking, writing the token — is one CUDA graph replayed per token.

- compaction: every `compact_every` steps (one host sync, the same one that stops decoding once every row has
  ended) the rows that have ended are dropped from the batch and the KV cache when at most half the rows are
  still running; the decode step is then re-captured for the smaller batch. A finished row costs nothing after
  the next compaction, so answers of very different lengths cost about their real tokens, not the longest
  one's × the batch. The sampling noise is still drawn for the whole original batch and indexed by the rows
  left, so compaction changes no token, greedy or sampled (tests/unit/test_static_decoder.py).

On by default on GPU (timed in engine/bench/README.md; `engine_kwargs.hf.*=false` turns each off):
`triton_attention` (kernels/decode_attention.py), `fused_sampling` (kernels/fused_sampling.py), `compile_step` (the
whole decode forward as one torch.compile'd graph). On by default everywhere: prompts without padding prefill with
plain causal SDPA (`causal_prefill`).

On CPU (or with `cuda_graphs=False`) the same step runs eagerly. The log-prob returned for each token is under
the temperature-scaled distribution (before top-k/top-p/min-tokens masking): what the actor recomputes, so
`rollout_log_probs` vs `old_log_probs` measures numerical mismatch only.
"""
from __future__ import annotations

import copy
import warnings

import torch

from engine.adapters import lora
from engine.rollout import batch_invariant
from engine.rollout.decode_kernels import KernelChoice
from engine.rollout.static_attention import ATTN_NAME, register_attention

# torch.compile backend of `compile_step`; CPU tests use "aot_eager": the same tracing, guards and dynamic-shape
# recompiles without inductor's C++ code generation, which is not what runs on a GPU anyway
STEP_COMPILE_BACKEND = "inductor"


def _set_tensor(root: torch.nn.Module, name: str, tensor: torch.Tensor, kind: str) -> None:
    mod_name, _, leaf = name.rpartition(".")
    mod = root.get_submodule(mod_name) if mod_name else root
    getattr(mod, kind)[leaf] = tensor


class StaticDecoder:
    """Generates with a static cache on a twin of `module` that shares its (gathered) tensors."""

    def __init__(self, module: torch.nn.Module, cuda_graphs: bool = True, compile_blocks: bool = False,
                 compact_every: int = 32, compact_below: float = 0.5, triton_attention: bool = False,
                 fused_sampling: bool = False, compile_step: bool = False, causal_prefill: bool = True,
                 exact: bool = False):
        self.src = module
        # exact mode (docs/exact-mode.md): the twin runs the batch-invariant ops of engine/rollout/batch_invariant.py,
        # as the actor does, and the token's log-prob comes from the actor's own tiled log-softmax. Kernels that
        # compute differently from the actor (Triton attention, fused sampling, torch.compile) are off, and so are
        # CUDA graphs (the exact attention syncs with the host for its tile count)
        self.exact = exact
        if exact:
            cuda_graphs = triton_attention = fused_sampling = compile_step = compile_blocks = False
        self.causal_prefill = causal_prefill  # unpadded prompts: causal SDPA on the shared KV heads, no 4-D mask
        # the whole decode forward (embedding, every layer with its RoPE, cache writes and attention, the LM head)
        # as one torch.compile'd graph instead of compiled norms/MLPs between eager attention code
        self.compile_step = compile_step
        self._step_fn = None
        self.cuda_graphs = cuda_graphs
        self.kernels = KernelChoice(triton_attention, fused_sampling)
        self.compile_blocks = compile_blocks
        self.compact_every = int(compact_every)  # 0: never drop finished rows
        self.compact_below = float(compact_below)  # compact once running rows ≤ this fraction of the batch
        self.twin = None
        self.graph_failed = False
        # (module, eager fwd, compiled for the starting batch size, compiled for any (compacted) batch size)
        self._blocks: list[tuple[torch.nn.Module, object, object, object]] = []
        self.last_stats: dict = {}  # the last call's decode steps and compactions (for logs and tests)

    def _prepare_compiled_blocks(self, twin) -> None:
        """`compile`: the decode step's RMSNorms and MLPs go through torch.compile (each a few fused kernels
        instead of a dozen small ones; the KV-cache attention stays eager). One compiled graph serves all
        layers: these blocks read no per-layer Python state."""
        for name, mod in twin.named_modules():
            leaf = name.rpartition(".")[2]
            if leaf in ("input_layernorm", "post_attention_layernorm", "mlp", "norm"):
                eager = mod.forward
                self._blocks.append((mod, eager, torch.compile(eager, dynamic=False),
                                     torch.compile(eager, dynamic=True)))

    def _try_compiled(self, bsz: int, hidden: int, dtype, device, dynamic: bool = False) -> None:
        """Compile ahead on the decode shape (outside any graph capture); any failure → eager blocks."""
        if not self._blocks:
            return
        try:
            seen = set()
            for mod, _, static, any_size in self._blocks:
                if type(mod) not in seen:
                    seen.add(type(mod))
                    (any_size if dynamic else static)(torch.zeros(bsz, 1, hidden, dtype=dtype, device=device))
        except Exception as exc:  # noqa: BLE001
            warnings.warn(f"static decode: torch.compile of norms/MLPs failed ({type(exc).__name__}: {exc}); "
                          "running them eagerly")
            self._use_compiled(None)
            self._blocks = []

    def _use_compiled(self, which: str | None) -> None:
        """which: "static" (the call's starting batch size), "dynamic" (compacted batches) or None (eager)."""
        for mod, eager, static, any_size in self._blocks:
            mod.forward = {"static": static, "dynamic": any_size}.get(which, eager)

    # ---- the twin ----------------------------------------------------------------------------------
    def bind(self) -> torch.nn.Module:
        """(Re)point the twin at the source module's current tensors; call with the source unsharded."""
        from transformers import AutoModelForCausalLM

        if self.twin is None:
            register_attention()
            config = copy.deepcopy(self.src.config)
            config.use_cache = True
            if self.exact:
                batch_invariant.register()
            with torch.device("meta"):
                twin = AutoModelForCausalLM.from_config(
                    config, attn_implementation=batch_invariant.ATTN_NAME if self.exact else ATTN_NAME)
            twin.eval()
            if self.exact:
                batch_invariant.make_exact(twin)
            self.twin = twin
            if self.compile_blocks and not self.compile_step:
                self._prepare_compiled_blocks(twin)
        # a LoRA actor: its weights with the adapter merged, under the plain model's names (computed per bind)
        src_params = dict(lora.merged_weights(self.src)) if lora.is_lora(self.src) else \
            dict(self.src.named_parameters(remove_duplicate=False))
        src_buffers = {lora.plain_name(k) if lora.is_lora(self.src) else k: v
                       for k, v in self.src.named_buffers(remove_duplicate=False)}
        for name, _ in list(self.twin.named_parameters(remove_duplicate=False)):
            if name not in src_params:
                raise RuntimeError(f"static decode: the actor module has no parameter {name}")
            _set_tensor(self.twin, name, src_params[name], "_parameters")
        for name, _ in list(self.twin.named_buffers(remove_duplicate=False)):
            if name in src_buffers:
                _set_tensor(self.twin, name, src_buffers[name], "_buffers")
        for name, t in list(self.twin.named_parameters()) + list(self.twin.named_buffers()):
            if t.is_meta or hasattr(t, "full_tensor"):
                raise RuntimeError(f"static decode: {name} is not a gathered tensor (is the module unsharded?)")
        return self.twin

    # ---- generation --------------------------------------------------------------------------------
    @torch.no_grad()
    def generate(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, position_ids: torch.Tensor,
                 response_length: int, *, eos: list[int], pad_id: int, min_new_tokens: int = 0,
                 do_sample: bool = True, temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0,
                 ) -> tuple[torch.Tensor, torch.Tensor]:
        """Returns (responses [B, R] with pad after the first end token, log-probs [B, R] (0 after it))."""
        return self._generate(input_ids, attention_mask, position_ids, response_length, eos=eos, pad_id=pad_id,
                              min_new_tokens=min_new_tokens, do_sample=do_sample, temperature=temperature,
                              top_k=top_k, top_p=top_p)

    def _decode_forward(self, tok, last_pos, valid, k, first_key, key_pos, cache, use_triton: bool):
        """One decode step's logits [B, V]: token k-1 at position last_pos + k, written to cache slot
        first_key + k, where first_key = prompt width - 1 is a 0-d tensor so that another width reuses a compiled
        graph."""
        mask = (valid & (key_pos <= first_key + k)[None, :])[:, None, None, :]
        extra = {"decode_keys": first_key + k + 1} if use_triton else {}  # the kernel reads only those positions
        out = self.twin(input_ids=tok, position_ids=last_pos + k, attention_mask=mask, past_key_values=cache,
                        use_cache=True, logits_to_keep=1, **extra)
        return out.logits[:, -1]

    def _step_forward(self):
        """The decode forward: eager (with compiled blocks if on), or one torch.compile'd graph (`compile_step`,
        shapes made dynamic where a later call differs: prompt width, a compacted batch)."""
        if not self.compile_step:
            return self._decode_forward
        if self._step_fn is None:
            self._step_fn = torch.compile(self._decode_forward, backend=STEP_COMPILE_BACKEND)
        return self._step_fn

    def _generate(self, input_ids, attention_mask, position_ids, response_length, *, eos, pad_id,
                  min_new_tokens, do_sample, temperature, top_k, top_p):
        from transformers import StaticCache

        twin = self.bind()
        device = input_ids.device
        use_triton = self.kernels.use_triton(twin.config, device, twin.model.embed_tokens.weight.dtype)
        use_fused = self.kernels.use_fused(twin.config, device, twin.model.embed_tokens.weight.dtype, do_sample,
                                           top_k, top_p)
        bsz, plen = input_ids.shape
        total = plen + response_length
        cache = StaticCache(config=twin.config, max_cache_len=total)
        valid = torch.cat([attention_mask.bool(), torch.ones(bsz, response_length, dtype=torch.bool, device=device)], 1)
        key_pos = torch.arange(total, device=device)
        temp = float(temperature) if do_sample and temperature and temperature > 0 else 1.0
        eos_t = torch.tensor(eos, dtype=torch.long, device=device) if eos else None

        state = {
            "k": torch.zeros((), dtype=torch.long, device=device),             # index of the token being produced
            "tok": torch.zeros(bsz, 1, dtype=torch.long, device=device),       # last token (input of the next step)
            "done": torch.zeros(bsz, dtype=torch.bool, device=device),
            "responses": torch.full((bsz, response_length), pad_id, dtype=torch.long, device=device),
            "log_probs": torch.zeros(bsz, response_length, dtype=torch.float32, device=device),
            "valid": valid,                        # [rows, prompt + response]: keys a row may attend to
            "last_pos": position_ids[:, -1:],      # position of each row's last prompt token
            "rows": None,                          # after a compaction: the original index of each row kept
        }
        vocab = twin.config.vocab_size
        if use_fused:
            from engine.rollout.kernels.fused_sampling import fused_sample

            # the call's noise seed, from torch's generator (so torch.manual_seed makes a run repeatable)
            seed = torch.randint(0, 2**62, (), device=device)
            all_rows = torch.arange(bsz, device=device)

        def sample_and_store(logits: torch.Tensor) -> None:
            # In place on one fp32 copy: a token that top-k/top-p/min-tokens mask out is never sampled, so the
            # sampled token's (temperature-scaled) logit is unchanged by the masking and its log-prob under
            # the actor's distribution is x[tok] - logsumexp(x), with the logsumexp taken before masking.
            if use_fused:  # one kernel: logsumexp, min-tokens mask, Gumbel-max keyed by the original row
                tok, lp = fused_sample(logits, seed=seed, step=state["k"],
                                       rows=all_rows if state["rows"] is None else state["rows"], temperature=temp,
                                       do_sample=do_sample, eos=eos_t, min_new_tokens=min_new_tokens)
                return store(tok, lp)
            # exact: a copy, the logits themselves are what the log-prob is taken from (fp32 logits: .float() is
            # the same tensor, which the lines below scale and mask in place)
            x = logits.float().clone() if self.exact else logits.float()
            rows = x.shape[0]
            if temp != 1.0:
                x.mul_(1.0 / temp)
            lse = None if self.exact else torch.logsumexp(x, dim=-1)
            if eos_t is not None and min_new_tokens > 0:  # forbid the end token until min_new_tokens
                block = torch.where(state["k"] < min_new_tokens, float("-inf"), 0.0)
                x.index_add_(1, eos_t, block.expand(rows, eos_t.numel()).contiguous())
            if do_sample and top_k and top_k > 0:
                kth = torch.topk(x, int(top_k), dim=-1).values[:, -1:]
                x.masked_fill_(x < kth, float("-inf"))
            if do_sample and top_p < 1.0:
                sorted_x, order = torch.sort(x, dim=-1, descending=True)
                probs = torch.softmax(sorted_x, dim=-1)
                drop = (probs.cumsum(-1) - probs) > top_p
                x.scatter_(1, order, sorted_x.masked_fill_(drop, float("-inf")))
                del sorted_x, order, probs, drop
            if do_sample:
                # noise for every row of the original batch, kept rows picked out: a row's noise (hence its
                # tokens) does not depend on which other rows are still in the batch
                noise = torch.empty(bsz, vocab, dtype=x.dtype, device=device).exponential_()
                if state["rows"] is not None:
                    noise = noise.index_select(0, state["rows"])
                tok = (x - noise.log_()).argmax(dim=-1)  # Gumbel-max: a sample of softmax(x)
                del noise
            else:
                tok = x.argmax(dim=-1)
            if self.exact:  # the actor's own log-softmax, on the same row tiles
                lp = batch_invariant.exact_logprobs_and_entropy(logits, tok, temp, calc_entropy=False)[0]
            else:
                lp = x.gather(1, tok[:, None]).squeeze(1) - lse
            del x
            store(tok, lp)

        def store(tok: torch.Tensor, lp: torch.Tensor) -> None:
            rows = tok.shape[0]
            done = state["done"]
            tok = torch.where(done, pad_id, tok)
            lp = torch.where(done, 0.0, lp)
            if eos_t is not None:
                done |= (tok[:, None] == eos_t[None, :]).any(-1)
            col = state["k"].view(1, 1).expand(rows, 1)
            state["responses"].scatter_(1, col, tok[:, None])
            state["log_probs"].scatter_(1, col, lp[:, None])
            state["tok"].copy_(tok[:, None])
            state["k"].add_(1)

        first_key = torch.tensor(plen - 1, device=device)
        forward = self._step_forward()

        def decode_step() -> None:
            nonlocal forward
            args = (state["tok"], state["last_pos"], state["valid"], state["k"], first_key, key_pos, cache, use_triton)
            if forward == self._decode_forward or (device.type == "cuda" and torch.cuda.is_current_stream_capturing()):
                return sample_and_store(forward(*args))
            try:  # a compiled step (compiled now, or again for new shapes); the step writes the same cache slot
                logits = forward(*args)  # if it is run again eagerly below
            except Exception as exc:  # noqa: BLE001
                if _other_thread_tracing(exc):
                    # colocate_async: the trainer's thread was compiling (FX tracing is flagged process-wide) as
                    # this thread compiled for new shapes; this call decodes eagerly, the next compiles again
                    warnings.warn("static decode: the decode step's compile met another thread's; this generation "
                                  "decodes eagerly")
                else:
                    warnings.warn(f"static decode: torch.compile of the decode step failed ({type(exc).__name__}: "
                                  f"{exc}); decoding eagerly")
                    self.compile_step = False
                forward = self._decode_forward
                logits = forward(*args)
            sample_and_store(logits)

        # the full-batch results; rows dropped by a compaction are final and written here first
        responses = state["responses"]
        log_probs = state["log_probs"]

        def compact() -> None:
            keep = (~state["done"]).nonzero().squeeze(1)
            rows = state["rows"] if state["rows"] is not None else torch.arange(bsz, device=device)
            if state["rows"] is not None:  # write back everything so far; kept rows are overwritten at the end
                responses.index_copy_(0, rows, state["responses"])
                log_probs.index_copy_(0, rows, state["log_probs"])
            for key in ("tok", "done", "responses", "log_probs", "valid", "last_pos"):
                state[key] = state[key].index_select(0, keep)
            state["rows"] = rows.index_select(0, keep)
            cache.reorder_cache(keep)

        # prefill: causal over the prompt, pads never attended as keys; each query sees itself (no empty rows)
        q_pos = torch.arange(plen, device=device)
        prefill_mask = (q_pos[None, :] <= q_pos[:, None])[None] & attention_mask.bool()[:, None, :]
        prefill_mask |= torch.eye(plen, dtype=torch.bool, device=device)[None]
        # no padding in any prompt (W1, a dataset of equal-length prompts): plain causal attention, which SDPA runs
        # as FlashAttention reading the shared KV heads directly (one host sync per call)
        causal = {"prefill_causal": True} if self.causal_prefill and bool(attention_mask.all()) else {}
        out = twin(input_ids=input_ids, position_ids=position_ids, attention_mask=prefill_mask[:, None],
                   past_key_values=cache, use_cache=True, logits_to_keep=1, **causal)
        sample_and_store(out.logits[:, -1])
        del out

        produced = 1
        compactions: list[tuple[int, int]] = []  # (tokens produced, rows kept)
        hidden, wdtype = twin.config.hidden_size, twin.model.embed_tokens.weight.dtype
        self._try_compiled(bsz, hidden, wdtype, device)
        self._use_compiled("static")  # decode steps only: the prefill's shapes are compiled for nothing
        use_graph = self.cuda_graphs and device.type == "cuda" and not self.graph_failed
        graph = None
        warmups = 2  # before the first capture; one after each compaction (new shapes: compile, cuBLAS plans)
        check = self.compact_every if self.compact_every > 0 else 32
        while produced < response_length:
            if use_graph and graph is None and response_length - produced > warmups + 2:
                stream = torch.cuda.Stream()
                stream.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(stream):
                    for _ in range(warmups):  # warm-up steps are real steps
                        decode_step()
                        produced += 1
                torch.cuda.current_stream().wait_stream(stream)
                try:
                    graph = torch.cuda.CUDAGraph()
                    # thread_local: another thread's CUDA call (a background checkpoint write, a logger's
                    # memory query) must not invalidate this capture; only this thread's calls are checked
                    with torch.cuda.graph(graph, capture_error_mode="thread_local"):
                        decode_step()
                except Exception as exc:  # noqa: BLE001 - fall back to eager steps
                    warnings.warn(f"static decode: CUDA graph capture failed ({type(exc).__name__}: {exc}); "
                                  "decoding eagerly")
                    self.graph_failed, use_graph, graph = True, False, None
            if graph is not None:
                graph.replay()
            else:
                decode_step()
            produced += 1
            if eos_t is not None and produced % check == 0 and produced >= min_new_tokens:
                running = int((~state["done"]).sum())  # the one host sync of the interval
                if running == 0:
                    break
                rows_now = state["done"].shape[0]
                if (self.compact_every > 0 and running < rows_now and running <= rows_now * self.compact_below
                        and response_length - produced > 1):
                    graph = None  # its tensors are replaced: re-captured for the new batch size
                    compact()
                    compactions.append((produced, running))
                    self._try_compiled(running, hidden, wdtype, device, dynamic=True)
                    self._use_compiled("dynamic")
                    warmups = 1
        self._use_compiled(None)
        del graph  # the cache goes with this frame
        if state["rows"] is not None:
            responses.index_copy_(0, state["rows"], state["responses"])
            log_probs.index_copy_(0, state["rows"], state["log_probs"])
        self.last_stats = {"steps": produced, "compactions": compactions,
                           "attention": "triton" if use_triton else "eager",
                           "sampling": "fused" if use_fused else "torch",
                           "compiled": "step" if forward != self._decode_forward else
                           ("blocks" if self._blocks else "none")}
        return responses, log_probs


def _other_thread_tracing(exc: BaseException) -> bool:
    """torch.compile refused because FX tracing was on: a flag of the whole process, set while another thread
    (the trainer's, compiling its layers) traces, and gone once it is done."""
    return isinstance(exc, RuntimeError) and "FX to symbolically trace" in str(exc)
