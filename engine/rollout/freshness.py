"""Did the update reach the rollout? A check after every weight sync (issue 27; verl #7495: a LoRA adapter that
never reached vLLM left a run sampling from the base model for months, every metric looking normal).

The check compares a *fingerprint* of the weights the rollout engine actually computes with against the same
fingerprint of the actor's weights (LoRA merged: W + scale · B A), both in the rollout's dtype:

    f(W) = sum_i s_i · sum_{j in J} x_j · W[i, j]        (float64; per parameter, under the plain HF name)

with s_i = ±1 per row (seeded by the parameter's name), J = 8 evenly spaced columns and x_j = ±1 (seeded by the
width). Every row is covered, so an update of any output (any token's embedding, any adapted layer: B A is dense)
moves f. It costs 8 columns per parameter on each side, no copy of the weights: the actor's side reads its local
FSDP shards and sums the partial fingerprints over the workers in one all-reduce (for LoRA it gathers the small
factors A and B and forms B A, the same arithmetic as the sync's merge, so a correct sync compares equal to the
bit); vLLM's CPU backend, whose linear weights live in packed oneDNN buffers, is read through its own kernel with 8
one-hot rows, which is exact.

The actor's side is computed from the actor module itself (its own merge of the adapter), never from what the sync
streamed, so a sync that streams the wrong weights (the base without the adapter) is caught like a skipped one.
Per parameter, with scale = the L2 norm of the actor's fingerprinted entries:

    gap    = |f(rollout) - f(actor now)|  / scale        rollout/weight_fingerprint_gap   (max over parameters)
    change = |f(actor now) - f(actor at the last check)| / scale   rollout/actor_weight_change

A parameter is stale when gap > GAP_FLOOR and gap >= change / 2: the rollout is no nearer the actor's new weights
than its old ones. A correct sync copies the weights exactly in the rollout's dtype (gap 0, or float64 rounding); a
skipped sync gives gap = change, a rollout left on the base gives gap >= change. `rollout/weights_stale` is 1 when
any parameter of any worker's rollout is stale; `rollout/stale_params` counts them (the worst worker).
"""
from __future__ import annotations

import zlib

import torch
import torch.distributed as dist

from engine.adapters import lora

COLUMNS = 8  # columns fingerprinted per parameter
GAP_FLOOR = 1e-5  # relative gap below which a rollout is fresh whatever moved (a correct sync gives ~1e-16)

_row_signs: dict[tuple[str, int, torch.device], torch.Tensor] = {}
_columns: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}


def row_signs(name: str, rows: int, device: torch.device | str = "cpu") -> torch.Tensor:
    """±1 per row of a parameter, from its (plain HF) name: the same on the actor's and the rollout's side."""
    key = (name, rows, torch.device(device))
    if key not in _row_signs:
        gen = torch.Generator().manual_seed(zlib.crc32(name.encode()))
        signs = torch.randint(0, 2, (rows,), generator=gen).double() * 2 - 1
        _row_signs[key] = signs.to(device)  # kept per device: no copy per check
    return _row_signs[key]


def columns(width: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(column indices J, their signs x) for a parameter `width` columns wide (its shape[1:] flattened)."""
    if width not in _columns:
        k = min(COLUMNS, width)
        index = torch.arange(k) * width // k + (width // k) // 2
        gen = torch.Generator().manual_seed(width)
        _columns[width] = (index, torch.randint(0, 2, (k,), generator=gen).double() * 2 - 1)
    return _columns[width]


def row_sums(block: torch.Tensor, width: int) -> torch.Tensor:
    """sum_j x_j W[i, j] per row, from W's fingerprinted columns `block` [rows, k] (float64)."""
    return block.double() @ columns(width)[1].to(block.device)


def _block(weight: torch.Tensor) -> tuple[torch.Tensor, int]:
    """A parameter's fingerprinted columns [rows, k] and its width."""
    w = weight.reshape(weight.shape[0], -1) if weight.dim() else weight.reshape(1, 1)
    index = columns(w.shape[1])[0].to(w.device)
    return w.index_select(1, index), w.shape[1]


def _local(p: torch.Tensor) -> tuple[torch.Tensor, int, bool]:
    """(the rows this worker holds, their first row, sharded?) of a parameter: an FSDP2 DTensor is sharded on dim 0
    in torch.chunk's pieces (ceil(rows / world) each)."""
    if not hasattr(p, "to_local"):
        return p, 0, False
    local = p.to_local()
    rows = p.shape[0]
    rank = p.device_mesh.get_local_rank()
    chunk = -(-rows // p.device_mesh.size())
    return local, min(rank * chunk, rows), True


@torch.no_grad()
def actor_fingerprints(module: torch.nn.Module, dtype: torch.dtype | None) -> dict[str, tuple[float, float]]:
    """{plain HF name: (f, scale)} of the actor's weights as the rollout should hold them: LoRA layers merged
    (W + scale · B A, in the parameters' own precision, as peft defines it), then cast to `dtype` (None: as they
    are). Collective over the workers when the module is sharded (every rank calls it; not inside `unsharded`)."""
    adapted = {}
    if lora.is_lora(module):
        from peft.tuners.lora import LoraLayer

        adapted = {f"{name}.base_layer.weight": sub for name, sub in module.named_modules()
                   if isinstance(sub, LoraLayer) and sub.active_adapters}
    names, sharded, values = [], [], []
    for name, rows in _named_rows(module):
        p = module.get_parameter(name)
        local, first, is_sharded = _local(p.detach())
        layer = adapted.get(name)
        if layer is not None:
            local = local + _delta_rows(layer, first, local.shape[0]).to(local.dtype)
        block, width = _block(local if dtype is None else local.to(dtype))
        plain = _plain(module, name)
        sums = row_sums(block, width)
        signs = row_signs(plain, rows, sums.device)[first:first + sums.shape[0]]
        values.append(torch.stack([(signs * sums).sum(), block.double().pow(2).sum()]).cpu())
        names.append(plain)
        sharded.append(is_sharded)
    if not names:
        return {}
    table = torch.stack(values)  # [params, 2]
    mask = torch.tensor(sharded)
    if mask.any() and dist.is_initialized() and dist.get_world_size() > 1:
        part = table[mask].contiguous()  # sharded rows: partial sums over this worker's rows
        dist.all_reduce(part)
        table[mask] = part
    return {n: (float(f), float(s2) ** 0.5) for n, (f, s2) in zip(names, table.tolist())}


def _plain(module, name: str) -> str:
    return lora.plain_name(name.replace(".modules_to_save.default.", ".")) if lora.is_lora(module) else name


def _named_rows(module) -> list[tuple[str, int]]:
    """(parameter name, rows) of what a rollout holds: every parameter but an adapter's own (tied weights under both
    names, as the sync streams them)."""
    return [(name, p.shape[0] if p.dim() else 1) for name, p in module.named_parameters(remove_duplicate=False)
            if ".lora_A." not in name and ".lora_B." not in name and ".original_module." not in name]


def _delta_rows(layer, first: int, rows: int) -> torch.Tensor:
    """Rows [first, first + rows) of scale · B A summed over the layer's active adapters. A and B are gathered whole
    (the adapter's small factors) and B A formed whole, as the sync's merge does: the same product of the same shapes
    gives the same bits, where a product of B's local rows alone may round differently and flip a bf16 weight."""
    delta = None
    for adapter in layer.active_adapters:
        if adapter not in layer.lora_A:
            continue
        a = layer.lora_A[adapter].weight
        b = layer.lora_B[adapter].weight
        a = a.full_tensor() if hasattr(a, "full_tensor") else a
        b = b.full_tensor() if hasattr(b, "full_tensor") else b
        d = (b.float() @ a.float()) * layer.scaling[adapter]
        delta = d if delta is None else delta + d
    return delta[first:first + rows]


def engine_fingerprints(model: torch.nn.Module, rows: dict[str, int], dtype: torch.dtype,
                        parts_of) -> dict[str, float]:
    """{HF name: f} of a rollout engine's model (one vLLM engine, no tensor parallelism). `rows`: the actor's
    parameters and their row counts; `parts_of(name)`: the HF names packed (dim 0, in order) into an engine
    parameter (vLLM's qkv_proj, gate_up_proj). Padded rows (vLLM's vocabulary padding) are left out."""
    out = {}
    for module_name, module in model.named_modules():
        for param_name, param in module.named_parameters(recurse=False):
            name = f"{module_name}.{param_name}" if module_name else param_name
            parts = parts_of(name)
            if not all(p in rows for p in parts):
                continue
            if param_name == "weight" and param.numel() == 0 and hasattr(module, "cpu_linear"):
                # vLLM CPU: the weight lives in the kernel's packed buffer; one-hot rows read columns J exactly
                width = int(module.input_size_per_partition)
                index = columns(width)[0]
                onehot = torch.zeros(len(index), width, dtype=dtype)
                onehot[torch.arange(len(index)), index] = 1
                block = module.cpu_linear(onehot, param, None).t()
            else:
                block, width = _block(param.detach())
            sums = row_sums(block, width)
            start = 0
            for part in parts:
                n = rows[part]
                out[part] = float((row_signs(part, n, sums.device) * sums[start:start + n]).sum())
                start += n
    return out


def module_fingerprints(named: dict[str, torch.Tensor], rows: dict[str, int]) -> dict[str, float]:
    """{name: f} of plain (unsharded) tensors a rollout computes with (e.g. the static decoder's twin)."""
    out = {}
    for name, tensor in named.items():
        if name in rows:
            block, width = _block(tensor.detach())
            sums = row_sums(block, width)[: rows[name]]
            out[name] = float((row_signs(name, rows[name], sums.device) * sums).sum())
    return out


class FreshnessCheck:
    """Judges a rollout's weights against the actor's after each sync; keeps the actor's previous fingerprints
    (two floats per parameter) to know how far the actor moved. `collective`: every worker calls it together (the
    worst worker's numbers are reported by all); `baseline`: fingerprint the actor now (else at the first call)."""

    def __init__(self, module: torch.nn.Module, dtype: torch.dtype | None, rollout_fingerprints, *,
                 collective: bool = True, baseline: bool = True):
        self.module, self.dtype, self.rollout_fingerprints = module, dtype, rollout_fingerprints
        self.collective = collective
        self.rows = {_plain(module, name): rows for name, rows in _named_rows(module)}
        self.previous = actor_fingerprints(module, dtype) if baseline else {}

    def __call__(self) -> dict[str, float]:
        actor = actor_fingerprints(self.module, self.dtype)
        rollout = self.rollout_fingerprints(self.rows)
        gap_max = change_max = 0.0
        stale = 0
        for name, got in rollout.items():
            f, scale = actor[name]
            if scale == 0:
                continue
            gap = abs(got - f) / scale
            change = abs(f - self.previous.get(name, (f, scale))[0]) / scale
            gap_max, change_max = max(gap_max, gap), max(change_max, change)
            stale += gap > GAP_FLOOR and gap >= 0.5 * change
        self.previous = actor
        if not rollout:  # nothing compared is never "fresh"
            gap_max, stale = float("inf"), 1
        # the worst worker's numbers on every worker (the driver averages workers' metrics)
        numbers = torch.tensor([float(stale > 0), gap_max, change_max, float(stale)], dtype=torch.float64)
        if self.collective and dist.is_initialized() and dist.get_world_size() > 1:
            dist.all_reduce(numbers, op=dist.ReduceOp.MAX)
        return {"rollout/weights_stale": numbers[0].item(), "rollout/weight_fingerprint_gap": numbers[1].item(),
                "rollout/actor_weight_change": numbers[2].item(), "rollout/stale_params": numbers[3].item()}


def for_rollout(module: torch.nn.Module, rollout) -> FreshnessCheck | None:
    """The check for a rollout that holds weights of its own (vLLM: `weight_fingerprints`); None for one that
    samples with the actor module itself (transformers' generate) or cannot be fingerprinted (tensor parallel)."""
    fingerprints = getattr(rollout, "weight_fingerprints", None)
    dtype = rollout.fingerprint_dtype() if fingerprints is not None else None
    if dtype is None:
        return None
    return FreshnessCheck(module, dtype, fingerprints)


def for_static_decoder(module: torch.nn.Module, decoder) -> FreshnessCheck:
    """The check of the static decoder (static_decoder.py), run at each training generation inside `unsharded`, on
    the tensors its twin was bound to and decoded with (`bind`: the actor's own, or for LoRA merged copies) against
    the actor's unsharded parameters. Not collective: the agent loop may generate a different number of turns on
    each worker (the driver's mean over workers is then the share of stale workers, > 0 when any)."""
    return FreshnessCheck(module, None, lambda rows: module_fingerprints(
        dict(decoder.twin.named_parameters(remove_duplicate=False)), rows), collective=False, baseline=False)


def worst(seen: dict[str, float] | None, new: dict[str, float]) -> dict[str, float]:
    """Several checks in one step (the agent loop's turns): the worst numbers of each."""
    return dict(new) if not seen else {k: max(v, seen.get(k, v)) for k, v in new.items()}
