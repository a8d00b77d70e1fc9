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
  /** the async modes' timeline: each step's rollout and training spans as bars on a time axis (lib/timeline.ts) */
  timeline?: boolean;
  /** shown in place of the chart when the run has metrics but none of this chart's keys */
  absent?: string;
  /** shown under the title when every value the chart draws is 0 (a flat line that is right, and why) */
  zeroNote?: string;
  /** with a pattern: which of the matched keys to draw, in legend order (the pattern alone cannot say "the
   *  variable whose best@N is val-core" or order k numerically) */
  pick?: (matched: string[]) => string[];
  /** legend names of the drawn keys (default: the key without its role prefix) */
  names?: (keys: string[]) => Map<string, string>;
}

/** verl's validation statistics that pass@k draws from: val-core holds the core variable's best@N, mean@N and
 *  maj@N (N = val_kwargs.n), val-aux its best@k for the smaller k (engine/trainer/validation_metrics.py). */
const PASS_AT_K = /^val-(core|aux)\/.+\/[^/]+\/(best@\d+\/mean|mean@\d+|maj@\d+\/mean)$/;
const VAL_STAT = /^val-(core|aux)\/(.+)\/([^/]+)\/(best|mean|maj)@(\d+)(\/mean)?$/;

interface ValStat { key: string; core: boolean; group: string; stat: string; k: number }

function parseValStat(key: string): ValStat | null {
  const m = VAL_STAT.exec(key);
  if (!m || (m[4] === "mean") === (m[6] !== undefined)) return null; // mean@N has no /mean; best/maj@k need it
  return { key, core: m[1] === "core", group: `${m[2]}/${m[3]}`, stat: m[4], k: Number(m[5]) };
}

/** The pass@k lines: per data source, its core variable (the one with a val-core best@N, so only runs whose
 *  validation drew N > 1 answers) — best@k/mean for every logged k in increasing k, then mean@N and maj@N.
 *  Another variable's statistics (val-aux `reward` beside a core `acc`) are left out: one scale per chart. */
export function passAtKKeys(keys: string[]): string[] {
  const stats = keys.map(parseValStat).filter((s): s is ValStat => s !== null);
  const groups = [...new Set(stats.filter((s) => s.core && s.stat === "best").map((s) => s.group))].sort();
  return groups.flatMap((group) => {
    const mine = stats.filter((s) => s.group === group);
    const n = Math.max(...mine.filter((s) => s.core && s.stat === "best").map((s) => s.k));
    const best = mine.filter((s) => s.stat === "best").sort((a, b) => a.k - b.k);
    const rest = ["mean", "maj"].flatMap((stat) => mine.filter((s) => s.core && s.stat === stat && s.k === n));
    return [...best, ...rest].map((s) => s.key);
  });
}

/** pass@k, mean@N, maj@N; with several data sources, each name after its source and variable. */
export function passAtKNames(keys: string[]): Map<string, string> {
  const stats = keys.map(parseValStat).filter((s): s is ValStat => s !== null);
  const several = new Set(stats.map((s) => s.group)).size > 1;
  return new Map(stats.map((s) => {
    const name = s.stat === "best" ? `pass@${s.k}` : `${s.stat}@${s.k}`;
    return [s.key, several ? `${s.group} · ${name}` : name];
  }));
}

export const CHARTS: ChartDef[] = [
  // held-out: the core variable's mean@N, `acc` when the reward function returns it, else `reward`
  { id: "score", title: "Score / reward", keys: /^(critic\/score\/mean|critic\/rewards\/mean|val-core\/.+\/(acc|reward)\/mean@\d+)$/ },
  { id: "pass-at-k", title: "pass@k on held-out prompts (best of k of N answers; mean@N = pass@1, maj@N = majority vote)",
    keys: PASS_AT_K, pick: passAtKKeys, names: passAtKNames },
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
    panels: [{ keys: ["actor/pg_clipfrac"], title: "clip fraction: tokens whose ratio was clipped", percent: true }],
    zeroNote: "Flat at 0, as expected here: each step made one on-policy update (one epoch over one mini-batch, the whole "
      + "batch), so the old and new policy are the same: no KL between them, nothing to clip. With several mini-batches or "
      + "epochs a step, it shows how far the later updates move." },
  { id: "grad-norm", title: "Grad norms (▲ on the step axis: update skipped, non-finite gradient)", keys: ["actor/grad_norm", "critic/grad_norm"],
    flags: { keys: ["actor/grad_norm_nonfinite", "critic/grad_norm_nonfinite"], label: "update skipped" } },
  { id: "lr", title: "Learning rate", keys: ["actor/lr", "critic/lr"] },
  { id: "timing", title: "Step time breakdown (per step)", keys: /^timing_s\//, breakdown: true },
  { id: "timeline", title: "Rollout and training over time (async modes: the last 30 steps)",
    keys: ["timeline/train_start_s"], timeline: true },
  { id: "throughput", title: "Throughput (tokens/s)", keys: ["perf/throughput"] },
];

/** Compare overlays runs: a stacked breakdown per run would be unreadable, so it shows each run's step time;
 *  pass@k (a line per k per run) and the async timeline stay on the Run page. */
export const COMPARE_CHARTS: ChartDef[] = CHARTS.filter((c) => c.id !== "pass-at-k" && !c.timeline).map((c) =>
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
  const matched = all.filter((k) => re.test(k)).sort();
  return def.pick ? def.pick(matched) : matched;
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
