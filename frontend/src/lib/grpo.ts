/**
 * The group numbers GRPO used (engine/algos/advantages.py: compute_group_stats, compute_grpo_outcome_advantage):
 * the group's mean score and its std with Bessel's correction (n − 1, torch.std's default), and each answer's
 * advantage (score − mean) / (std + ε), or score − mean when the run does not divide by the std (Dr. GRPO).
 * A group whose answers all scored the same has std 0 and advantage 0; a group of one has mean 0, std 1.
 */

export const GRPO_EPSILON = 1e-6;

export interface GroupStats {
  n: number;
  mean: number;
  /** the std GRPO divides by: n − 1 in the denominator */
  std: number;
  degenerate: boolean;
}

export function grpoGroupStats(scores: readonly number[]): GroupStats | null {
  const n = scores.length;
  if (n === 0) return null;
  if (n === 1) return { n, mean: 0, std: 1, degenerate: false };
  const mean = scores.reduce((a, b) => a + b, 0) / n;
  const degenerate = scores.every((v) => v === scores[0]);
  if (degenerate) return { n, mean: scores[0], std: 0, degenerate };
  const std = Math.sqrt(scores.reduce((a, b) => a + (b - mean) ** 2, 0) / (n - 1));
  return { n, mean, std, degenerate };
}

export function grpoAdvantage(score: number, stats: GroupStats, normByStd = true): number {
  const centred = score - stats.mean;
  return normByStd ? centred / (stats.std + GRPO_EPSILON) : centred;
}
