/** Exact mode (actor_rollout_ref.rollout.exact, docs/exact-mode.md): the Run page's one-line fact. */
import type { Series } from "./series";

export const EXACT_MISMATCHED = "exact/mismatched_tokens";
export const EXACT_CHECKED = "exact/checked_tokens";

export function isExactConfig(config: Record<string, unknown> | null | undefined): boolean {
  const arr = config?.actor_rollout_ref as Record<string, unknown> | undefined;
  const rollout = arr?.rollout as Record<string, unknown> | undefined;
  return rollout?.exact === true;
}

const total = (s: Series | undefined) => (s?.values ?? []).filter(Number.isFinite).reduce((a, b) => a + b, 0);

/** "exact: N" where N is the number of response tokens, over every logged step, whose rollout and actor
 *  log-probs were not bit-equal (0 for an exact run; a run that was not exact fails at that step). Null for a run
 *  not in exact mode; "exact: –" before the first step. */
export function exactFact(config: Record<string, unknown> | null | undefined,
  series: ReadonlyMap<string, Series> | undefined): { text: string; title: string } | null {
  if (!isExactConfig(config)) return null;
  const mismatched = series?.get(EXACT_MISMATCHED);
  const steps = mismatched?.values.filter(Number.isFinite).length ?? 0;
  if (!steps) return { text: "exact: –", title: "exact mode: no step checked yet" };
  return {
    text: `exact: ${total(mismatched)}`,
    title: `exact mode: response tokens whose rollout and actor log-probs differ, over ${steps} step${steps === 1 ? "" : "s"} `
      + `(${total(series?.get(EXACT_CHECKED))} tokens checked)`,
  };
}
