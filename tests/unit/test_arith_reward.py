import pytest

from engine.reward.arith import compute_score


@pytest.mark.parametrize("response, truth, score", [
    ("135", "135", 1.0),
    (" 135\n", "135", 1.0),
    ("-41", "-41", 1.0),
    ("41", "-41", 0.0),
    ("134", "135", 0.0),
    ("0135", "135", 0.0),
    ("135 apples", "135", 0.0),
    ("1355", "135", 0.0),
    ("", "135", 0.0),
])
def test_exact_match_after_stripping(response, truth, score):
    result = compute_score(response, truth, data_source="arith", extra_info={})
    assert result == score and isinstance(result, float)
