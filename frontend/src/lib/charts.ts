/** The charts of the Run and Compare pages: which metric keys each one draws. */

export interface ChartDef {
  id: string;
  title: string;
  /** exact keys, or a pattern matched against every key the run has */
  keys: string[] | RegExp;
  /** keys drawn on a second y axis (right side) */
  y2?: string[];
  y2title?: string;
  /** a shaded band [low, high] on the y axis: the healthy range */
  band?: [number, number];
  stacked?: boolean;
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
  { id: "response-length", title: "Response length", keys: ["response_length/mean", "response_length/max"], y2: ["response_length/clip_ratio"], y2title: "clip ratio" },
  { id: "update", title: "Update size: ppo_kl (old → new policy within a step) and clip fraction", keys: ["actor/ppo_kl"], y2: ["actor/pg_clipfrac"], y2title: "clip fraction" },
  { id: "grad-norm", title: "Grad norms (right axis: 1 = update skipped, non-finite gradient)", keys: ["actor/grad_norm", "critic/grad_norm"],
    y2: ["actor/grad_norm_nonfinite", "critic/grad_norm_nonfinite"], y2title: "skipped" },
  { id: "lr", title: "Learning rate", keys: ["actor/lr", "critic/lr"] },
  { id: "timing", title: "Step time breakdown (s)", keys: /^timing_s\/(?!step$)/, stacked: true },
  { id: "throughput", title: "Throughput (tokens/s)", keys: ["perf/throughput"] },
];

/** Compare overlays runs: a stacked breakdown per run would be unreadable, so it shows each run's step time. */
export const COMPARE_CHARTS: ChartDef[] = CHARTS.map((c) =>
  c.stacked ? { id: c.id, title: "Step time (s)", keys: ["timing_s/step"] } : c);

export function chartKeys(def: ChartDef, available: Iterable<string>): string[] {
  const all = [...available];
  if (Array.isArray(def.keys)) {
    const set = new Set(all);
    return [...def.keys, ...(def.y2 ?? [])].filter((k) => set.has(k));
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
    if (Array.isArray(def.keys)) for (const k of [...def.keys, ...(def.y2 ?? [])]) keys.add(k);
    else patterns.push(def.keys);
  }
  return { keys: [...keys], patterns };
}
