"""Rollout correction (TIS / IcePop weights, rejection) and the mismatch metrics: hand-computed numbers.

The same functions are compared with verl's on random inputs in test_verl_reference.py.
"""
import math

import pytest
import torch

from engine.algos.rollout_correction import parse_is_threshold, parse_rs, rollout_correction
from engine.protocol import Batch
from engine.trainer.rollout_mismatch import apply_rollout_correction, rollout_mismatch_metrics

# old - rollout log-probs (log rho): row 1 = (ln 3, ln 0.5, padding), row 2 = (ln 1.5, padding, padding)
OLD = torch.zeros(2, 3, dtype=torch.float64)
ROLLOUT = -torch.log(torch.tensor([[3.0, 0.5, 7.0], [1.5, 7.0, 7.0]], dtype=torch.float64))
MASK = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]], dtype=torch.float64)


def test_token_tis_weights_and_metrics():
    # truncated at 2: (2, 0.5 | 1.5); mean 4/3; one of three raw weights above 2, none below 1/2
    # ESS = 1 / mean((w / mean w)^2) = 1 / mean(1.5^2, 0.375^2, 1.125^2) = 1 / 1.21875
    w, mask, m = rollout_correction(OLD, ROLLOUT, MASK, rollout_is="token", rollout_is_threshold=2.0)
    torch.testing.assert_close(w, torch.tensor([[2.0, 0.5, 0.0], [1.5, 0.0, 0.0]], dtype=torch.float64))
    assert torch.equal(mask, MASK)
    assert m["rollout_corr/rollout_is_mean"] == pytest.approx(4 / 3, abs=1e-6)
    assert m["rollout_corr/rollout_is_max"] == pytest.approx(2.0, abs=1e-6)
    assert m["rollout_corr/rollout_is_min"] == pytest.approx(0.5, abs=1e-6)
    assert m["rollout_corr/rollout_is_ratio_fraction_high"] == pytest.approx(1 / 3, abs=1e-6)
    assert m["rollout_corr/rollout_is_ratio_fraction_low"] == 0.0
    assert m["rollout_corr/rollout_is_eff_sample_size"] == pytest.approx(1 / 1.21875, abs=1e-6)
    # mismatch: kl = mean(rollout - old) = -(ln 3 + ln 0.5 + ln 1.5) / 3
    assert m["rollout_corr/kl"] == pytest.approx(-math.log(2.25) / 3, abs=1e-6)


def test_sequence_weights_and_icepop_band():
    # sequence ratio: row 1 = 3 * 0.5 = 1.5 on each token, row 2 = 1.5
    w, _, _ = rollout_correction(OLD, ROLLOUT, MASK, rollout_is="sequence", rollout_is_threshold=2.0)
    torch.testing.assert_close(w, torch.tensor([[1.5, 1.5, 0.0], [1.5, 0.0, 0.0]], dtype=torch.float64))
    # IcePop band [0.6, 2.5] on token ratios: 3 and 0.5 fall outside and get weight 0
    w, _, m = rollout_correction(OLD, ROLLOUT, MASK, rollout_is="token", rollout_is_threshold="0.6_2.5")
    torch.testing.assert_close(w, torch.tensor([[0.0, 0.0, 0.0], [1.5, 0.0, 0.0]], dtype=torch.float64))
    assert m["rollout_corr/rollout_is_oob_ratio"] == pytest.approx(2 / 3, abs=1e-6)


def test_rejection_masks_tokens_and_sequences():
    # token_k1 keeps log(pi_rollout/pi_actor) in [ln 0.6, ln 2.5]: ratios 1/3 (out), 2 (in), 1/1.5 (in)
    _, mask, m = rollout_correction(OLD, ROLLOUT, MASK, rollout_rs="token_k1", rollout_rs_threshold="0.6_2.5")
    torch.testing.assert_close(mask, torch.tensor([[0.0, 1.0, 0.0], [1.0, 0.0, 0.0]], dtype=torch.float64))
    assert m["rollout_corr/rollout_rs_masked_fraction"] == pytest.approx(1 / 3, abs=1e-6)
    assert m["rollout_corr/rollout_rs_seq_masked_fraction"] == pytest.approx(0.5, abs=1e-6)
    # seq_max_k2 at 0.5: row 1's max of (ln 3)^2 / 2 = 0.603 is past it, so the whole row goes
    _, mask, _ = rollout_correction(OLD, ROLLOUT, MASK, rollout_rs="seq_max_k2", rollout_rs_threshold=0.5)
    torch.testing.assert_close(mask, torch.tensor([[0.0, 0.0, 0.0], [1.0, 0.0, 0.0]], dtype=torch.float64))


def test_bad_thresholds_name_the_problem():
    with pytest.raises(ValueError, match="lower_upper"):
        parse_is_threshold("two")
    with pytest.raises(ValueError, match="token_k9"):
        parse_rs("token_k9", 2.0)
    with pytest.raises(ValueError, match="rollout_rs_threshold"):
        parse_rs("token_k2", None)


def test_batch_correction_and_one_mismatch_metric():
    batch = Batch({"old_log_probs": OLD.float(), "rollout_log_probs": ROLLOUT.float() * MASK.float(),
                   "response_mask": MASK.float()})
    mismatch = rollout_mismatch_metrics(batch)
    # |log diff| mean = (ln 3 + ln 2 + ln 1.5) / 3; |p diff| mean = (|1/3 - 1| + |2 - 1| + |1/1.5 - 1|) / 3
    assert mismatch["actor/rollout_log_probs_absdiff"] == pytest.approx(math.log(9) / 3, abs=1e-6)
    assert mismatch["training/rollout_probs_diff_mean"] == pytest.approx((2 / 3 + 1 + 1 / 3) / 3, abs=1e-6)
    assert mismatch["rollout_corr/kl"] == pytest.approx(-math.log(2.25) / 3, abs=1e-6)

    class RC:
        rollout_is, rollout_is_threshold, rollout_is_batch_normalize = "token", 2.0, False
        rollout_rs, rollout_rs_threshold = "token_k1", "0.6_2.5"

    metrics = apply_rollout_correction(batch, RC)
    torch.testing.assert_close(batch["rollout_is_weights"], torch.tensor([[2.0, 0.5, 0.0], [1.5, 0.0, 0.0]]))
    torch.testing.assert_close(batch["response_mask"], torch.tensor([[0.0, 1.0, 0.0], [1.0, 0.0, 0.0]]))
    assert metrics["rollout_corr/rollout_rs_masked_fraction"] == pytest.approx(1 / 3, abs=1e-6)
    del batch.tensors["rollout_log_probs"]
    assert rollout_mismatch_metrics(batch) == {}  # no rollout log-probs: no metric, not a zero
    with pytest.raises(ValueError, match="decode=static"):
        apply_rollout_correction(batch, RC)
