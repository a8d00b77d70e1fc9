"""The threshold specifications of algorithm.rollout_correction, parsed (torch-free: the config check and the
algorithm, engine/algos/rollout_correction.py, read them the same way)."""
from __future__ import annotations

import math

RS_OPTIONS = ("token_k1", "token_k2", "token_k3", "seq_sum_k1", "seq_sum_k2", "seq_sum_k3", "seq_mean_k1",
              "seq_mean_k2", "seq_mean_k3", "seq_max_k2", "seq_max_k3")


def parse_is_threshold(spec: str | float) -> tuple[float, float | None]:
    """(upper, lower or None): a number is TIS's upper bound; "lower_upper" is IcePop's band."""
    if isinstance(spec, bool) or not isinstance(spec, (int, float, str)):
        raise ValueError(f"rollout_is_threshold must be a number or 'lower_upper', got {spec!r}")
    text = str(spec).strip()
    try:
        lower, upper = (float(x) for x in text.split("_", 1)) if "_" in text else (None, float(text))
    except ValueError:
        raise ValueError(f"rollout_is_threshold {spec!r} is neither a number nor 'lower_upper' (e.g. 0.5_2.0)") \
            from None
    if upper <= 0 or (lower is not None and not 0 < lower <= upper):
        raise ValueError(f"rollout_is_threshold {spec!r}: bounds must be positive with lower <= upper")
    return upper, lower


def parse_rs(options: str, thresholds: str | float | None) -> dict[str, tuple[float | None, float]]:
    """{option: (lower, upper)} in the statistic's own units (log-ratio for k1, divergence otherwise)."""
    names = list(dict.fromkeys(o.strip() for o in str(options).split(",") if o.strip()))
    bad = [o for o in names if o not in RS_OPTIONS]
    if not names or bad:
        raise ValueError(f"rollout_rs {options!r}: unknown option(s) {bad}; valid: {', '.join(RS_OPTIONS)}")
    if thresholds is None:
        raise ValueError("rollout_correction.rollout_rs needs rollout_rs_threshold (e.g. 2.0, or 0.5_2.0 for k1)")
    specs = [s.strip() for s in str(thresholds).split(",") if s.strip()]
    if len(specs) == 1:
        specs = specs * len(names)
    if len(specs) != len(names):
        raise ValueError(f"rollout_rs_threshold: give one threshold or one per option ({len(names)})")
    out = {}
    for name, spec in zip(names, specs):
        try:
            if name.endswith("k1"):
                lower, upper = (float(x) for x in spec.split("_", 1)) if "_" in spec else (1 / float(spec),
                                                                                         float(spec))
                if not 0 < lower <= upper:
                    raise ValueError
                out[name] = (math.log(lower), math.log(upper))
            else:
                upper = float(spec)
                if upper <= 0:
                    raise ValueError
                out[name] = (None, upper)
        except ValueError:
            raise ValueError(f"rollout_rs_threshold {spec!r} for {name}: positive number(s) expected"
                             + (" ('lower_upper' or one upper bound)" if name.endswith("k1") else "")) from None
    return out
