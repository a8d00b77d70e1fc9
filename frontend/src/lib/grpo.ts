/**
 * The group numbers of GRPO (engine/algos/advantages.py: compute_group_stats, compute_grpo_outcome_advantage):
 * the group's mean and its std with Bessel's correction (n − 1, torch.std's default), and each answer's
 * advantage (value − mean) / (std + ε), or value − mean when the run does not divide by the std (Dr. GRPO). The
 * value is the answer's reward (its score, less the KL penalty when that is in the reward): what the engine's
 * estimator reads. A group whose answers all scored the same has std 0 and advantage 0. A group of one has no
 * group statistic: its mean is its value, and GRPO, by convention, uses mean 0 and std 1 (the advantage is the
 * value itself).
 */

export const GRPO_EPSILON = 1e-6;

export interface GroupStats {
  n: number;
  /** the values' mean (for a group of one, its value) */
  mean: number;
  /** the std GRPO divides by (n − 1 in the denominator); null for a group of one: there is no group statistic */
  std: number | null;
  degenerate: boolean;
}

export function groupStats(values: readonly number[]): GroupStats | null {
  const n = values.length;
  if (n === 0) return null;
  if (n === 1) return { n, mean: values[0], std: null, degenerate: false };
  const degenerate = values.every((v) => v === values[0]);
  if (degenerate) return { n, mean: values[0], std: 0, degenerate };
  const mean = values.reduce((a, b) => a + b, 0) / n;
  const std = Math.sqrt(values.reduce((a, b) => a + (b - mean) ** 2, 0) / (n - 1));
  return { n, mean, std, degenerate };
}

/** The mean and std the engine's GRPO subtracts and divides by: a group of one uses 0 and 1. */
export function grpoUsed(stats: GroupStats): { mean: number; std: number } {
  return stats.std === null ? { mean: 0, std: 1 } : { mean: stats.mean, std: stats.std };
}

export function grpoAdvantage(value: number, stats: GroupStats, normByStd = true): number {
  const { mean, std } = grpoUsed(stats);
  const centred = value - mean;
  return normByStd ? centred / (std + GRPO_EPSILON) : centred;
}

/**
 * The mean and std a GRPO step used, read back from what it logged for some of the group's answers (their
 * values and mean advantages): a = (v − mean) / (std + ε), so two answers of different values give
 * std + ε = (v_i − v_j) / (a_i − a_j) and mean = v − a (std + ε); without the std division, mean = v − a. This
 * holds however many of the group's answers are at hand (a filter or a page may leave some out). Null where it
 * cannot be read back: no logged advantages, no two different values (with the std division), or advantages
 * that no single mean and std explain (not GRPO's).
 */
export function loggedGroupStats(values: readonly number[], advantages: readonly (number | null)[], normByStd = true,
  tolerance = 1e-3): { mean: number; std: number | null } | null {
  const pairs = values.map((v, i) => [v, advantages[i]] as const).filter((p): p is readonly [number, number] =>
    p[1] !== null && p[1] !== undefined && Number.isFinite(p[1]) && Number.isFinite(p[0]));
  if (pairs.length === 0) return null;
  let mean: number;
  let std: number | null = null;
  if (normByStd) {
    // the two answers farthest apart in value: the steadiest ratio (logged advantages are rounded)
    let lo = pairs[0];
    let hi = pairs[0];
    for (const p of pairs) {
      if (p[0] < lo[0]) lo = p;
      if (p[0] > hi[0]) hi = p;
    }
    if (hi[0] === lo[0] || hi[1] === lo[1]) return null;
    const scale = (hi[0] - lo[0]) / (hi[1] - lo[1]);
    if (!(scale > 0)) return null;
    mean = hi[0] - hi[1] * scale;
    std = Math.max(0, scale - GRPO_EPSILON);
    if (pairs.some(([v, a]) => Math.abs((v - mean) / scale - a) > tolerance * Math.max(1, Math.abs(a)))) return null;
  } else {
    mean = pairs.reduce((s, [v, a]) => s + v - a, 0) / pairs.length;
    if (pairs.some(([v, a]) => Math.abs(v - a - mean) > tolerance * Math.max(1, Math.abs(mean)))) return null;
  }
  return { mean, std };
}
