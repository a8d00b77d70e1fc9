import torch

from engine.algos.losses import agg_loss
from engine.workers.loss_weights import micro_batch_weights


def test_token_mean_over_micro_batches_equals_token_mean_over_the_mini_batch():
    torch.manual_seed(0)
    loss = torch.randn(6, 5)
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 0, 0, 0, 0], [1, 1, 0, 0, 0],
                         [1, 1, 1, 1, 0], [1, 0, 0, 0, 0], [1, 1, 1, 0, 0]], dtype=torch.float32)
    parts = [(0, 1), (1, 4), (4, 6)]  # micro-batches of unequal sizes and token counts
    for mode in ("token-mean", "token-sum", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm"):
        weights = micro_batch_weights([mask[a:b] for a, b in parts], mask, mode)
        combined = sum(agg_loss(loss[a:b], mask[a:b], mode) * w for (a, b), w in zip(parts, weights))
        assert torch.allclose(torch.as_tensor(combined), agg_loss(loss, mask, mode), atol=1e-6), mode
    # verl's rows-over-rows weighting would not give the token mean here
    rows = sum(agg_loss(loss[a:b], mask[a:b], "token-mean") * (b - a) / 6 for a, b in parts)
    assert not torch.allclose(rows, agg_loss(loss, mask, "token-mean"), atol=1e-3)


def test_sum_norm_divides_by_the_full_response_length_after_trimming():
    torch.manual_seed(1)
    loss = torch.randn(3, 8)
    mask = torch.zeros(3, 8)
    mask[:, :3] = 1  # the last 5 columns are padding in every row: a trimmed micro-batch keeps 3
    full = agg_loss(loss, mask, "seq-mean-token-sum-norm")
    trimmed = agg_loss(loss[:, :3], mask[:, :3], "seq-mean-token-sum-norm", norm_length=8)
    assert torch.allclose(full, trimmed)
    assert not torch.allclose(full, agg_loss(loss[:, :3], mask[:, :3], "seq-mean-token-sum-norm"))


def test_sum_norm_does_not_grow_with_the_micro_batch_size():
    """Dr.GRPO's loss is the same whether a mini-batch of 16 rows is cut into micro-batches of 1, 4 or 16 rows
    (it once grew 1x, 4x, 16x), and equals verl's: sum of row sums / rows / R."""
    torch.manual_seed(2)
    loss, mask = torch.randn(16, 6), (torch.rand(16, 6) > 0.3).float()
    mask[:, 0] = 1
    expected = (loss * mask).sum() / 16 / 6
    for size in (1, 4, 16):
        micro = [mask[i:i + size] for i in range(0, 16, size)]
        weights = micro_batch_weights(micro, mask, "seq-mean-token-sum-norm")
        total = sum(agg_loss(loss[i:i + size], m, "seq-mean-token-sum-norm") * w
                    for i, m, w in zip(range(0, 16, size), micro, weights))
        assert torch.allclose(torch.as_tensor(total), expected, atol=1e-6), size
