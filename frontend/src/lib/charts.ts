/** The charts of the Run and Compare pages: which metric keys each one draws. */

/** A panel under the chart's main one, on the same step axis: a series whose scale would flatten the main
 *  panel's lines (a clip ratio of 1/256 beside lengths in the hundreds) gets its own y axis there, never a
 *  right-hand axis over the same plot. */
export interface PanelDef {
  keys: string[];
  /** written above the panel, in the gap between panels (no rotated axis title to collide with tick labels) */
  title: string;
  /** a fraction in [0, 1], labelled in percent from 0 (1/256 reads 0.39%, not 3.9m) */
  percent?: boolean;
}

/** 0/1 keys (1 = the thing happened at that step): a marker on the x axis and a dotted line at each such
 *  step, not a series on a value axis. */
export interface FlagDef {
  keys: string[];
  /** what a 1 means, e.g. "update skipped" */
  label: string;
}

export interface ChartDef {
  id: string;
  title: string;
  /** exact keys, or a pattern matched against every key the run has */
  keys: string[] | RegExp;
  panels?: PanelDef[];
  flags?: FlagDef;
  /** a shaded band [low, high] on the main panel: the healthy range */
  band?: [number, number];
  /** the step-time breakdown: timing_s/* phases as stacked bars per step (seconds, or share of the step) */
  breakdown?: boolean;
  /** shown in place of the chart when the run has metrics but none of this chart's keys */
  absent?: string;
}

export const CHARTS: ChartDef[] = [
  { id: "score", title: "Score / reward", keys: /^(critic\/score\/mean|critic\/rewards\/mean|val-core\/.+\/reward\/mean@\d+)$/ },
  { id: "actor-loss", title: "Actor loss", keys: ["actor/pg_loss"] },
  { id: "critic-loss", title: "Critic loss", keys: ["critic/vf_loss"] },
  // KL to the reference only: actor/ppo_kl (old vs new policy inside one update) is 0 by construction for a
  // single on-policy update and would read as "KL is broken"; it has its own chart below
  { id: "kl", title: "KL to the reference (healthy 0.01–0.1 shaded)", keys: ["actor/reward_kl_penalty", "actor/kl_loss"], band: [0.01, 0.1],
    absent: "This run has no KL to the reference: no KL penalty in the reward (algorithm.use_kl_in_reward) and no KL loss "
      + "(actor_rollout_ref.actor.use_kl_loss), so nothing holds the policy near the reference model and there is no KL to plot." },
  { id: "entropy", title: "Entropy", keys: ["actor/entropy"] },
  { id: "response-length", title: "Response length (tokens)", keys: ["response_length/mean", "response_length/max"],
    panels: [{ keys: ["response_length/clip_ratio"], title: "clip ratio: answers cut at the length limit", percent: true }] },
  { id: "update", title: "Update size: ppo_kl (old → new policy within a step) and clip fraction", keys: ["actor/ppo_kl"],
    panels: [{ keys: ["actor/pg_clipfrac"], title: "clip fraction: tokens whose ratio was clipped", percent: true }] },
  { id: "grad-norm", title: "Grad norms (▲ on the step axis: update skipped, non-finite gradient)", keys: ["actor/grad_norm", "critic/grad_norm"],
    flags: { keys: ["actor/grad_norm_nonfinite", "critic/grad_norm_nonfinite"], label: "update skipped" } },
  { id: "lr", title: "Learning rate", keys: ["actor/lr", "critic/lr"] },
  { id: "timing", title: "Step time breakdown (per step)", keys: /^timing_s\//, breakdown: true },
  { id: "throughput", title: "Throughput (tokens/s)", keys: ["perf/throughput"] },
];

/** Compare overlays runs: a stacked breakdown per run would be unreadable, so it shows each run's step time. */
export const COMPARE_CHARTS: ChartDef[] = CHARTS.map((c) =>
  c.breakdown ? { id: c.id, title: "Step time (s)", keys: ["timing_s/step"] } : c);

/** Every exact key of a chart: its main keys, its panels' and its flags'. */
export function exactKeys(def: ChartDef): string[] {
  return [...(Array.isArray(def.keys) ? def.keys : []), ...(def.panels ?? []).flatMap((p) => p.keys), ...(def.flags?.keys ?? [])];
}

export function chartKeys(def: ChartDef, available: Iterable<string>): string[] {
  const all = [...available];
  if (Array.isArray(def.keys)) {
    const set = new Set(all);
    return exactKeys(def).filter((k) => set.has(k));
  }
  const re = def.keys;
  return all.filter((k) => re.test(k)).sort();
}

/** Every key some chart wants, among those available. */
export function allChartKeys(available: Iterable<string>, charts: ChartDef[] = CHARTS): string[] {
  const all = [...available];
  const out = new Set<string>();
  for (const def of charts) for (const k of chartKeys(def, all)) out.add(k);
  return [...out];
}

/** What a page of charts asks the server for: the exact keys, and the patterns (as RegExp) of the others. */
export function chartQuery(charts: ChartDef[]): { keys: string[]; patterns: RegExp[] } {
  const keys = new Set<string>();
  const patterns: RegExp[] = [];
  for (const def of charts) {
    for (const k of exactKeys(def)) keys.add(k);
    if (!Array.isArray(def.keys)) patterns.push(def.keys);
  }
  return { keys: [...keys], patterns };
}
