/**
 * Rollout vs actor: a vLLM (or any separate) rollout samples with its own log-probs; the actor recomputes them.
 * Per token the gap rollout − actor and the importance weight π_actor / π_rollout = exp(actor − rollout)
 * (what rollout correction multiplies into the loss, before truncation), and a per-answer summary so that
 * mismatch is found without reading every answer.
 */

/** A token whose |rollout − actor| log-prob gap exceeds this is counted as mismatched (e^0.1 ≈ 10% in probability). */
export const MISMATCH_THRESHOLD = 0.1;

export interface MismatchInput {
  old_log_probs?: (number | null)[] | null;
  extras?: Record<string, unknown> | null;
}

export function rolloutLogProbs(s: MismatchInput): (number | null)[] | null {
  const v = s.extras?.rollout_log_probs;
  return Array.isArray(v) ? (v as (number | null)[]) : null;
}

const finite = (v: unknown): v is number => typeof v === "number" && Number.isFinite(v);

/** rollout − actor per token (null where either is missing). */
export function logProbGap(s: MismatchInput): (number | null)[] | null {
  const rollout = rolloutLogProbs(s);
  const actor = s.old_log_probs;
  if (!rollout || !actor) return null;
  return rollout.map((r, i) => (finite(r) && finite(actor[i]) ? r - (actor[i] as number) : null));
}

/** exp(actor − rollout) per token. */
export function importanceWeights(s: MismatchInput): (number | null)[] | null {
  const gap = logProbGap(s);
  return gap ? gap.map((g) => (g === null ? null : Math.exp(-g))) : null;
}

export interface MismatchSummary {
  maxAbs: number;
  over: number;
  tokens: number;
}

export function mismatchSummary(s: MismatchInput, threshold = MISMATCH_THRESHOLD): MismatchSummary | null {
  const gap = logProbGap(s)?.filter((g): g is number => g !== null);
  if (!gap || !gap.length) return null;
  return { maxAbs: Math.max(...gap.map(Math.abs)), over: gap.filter((g) => Math.abs(g) > threshold).length, tokens: gap.length };
}
