/**
 * Asynchronous training (issue 29): the staleness chart of the Run page and each answer's policy versions.
 * A policy version is the number of actor updates in the weights that produced a token; step s trains on
 * version s − 1, so verl's staleness of an answer is (s − 1) − its newest version, the worst (s − 1) − its oldest.
 */
import type { ChartDef } from "./charts";
import type { Series } from "./series";

const P = "training/off_policy";
export const STALENESS_KEYS = {
  staleness: [`${P}/trajectory_staleness/mean`, `${P}/trajectory_staleness/max`],
  worst: [`${P}/trajectory_staleness_worst/mean`, `${P}/trajectory_staleness_worst/max`],
  spans: [`${P}/trajectory_spans/mean`, `${P}/trajectory_spans/max`],
  evicted: [`${P}/evicted_samples`],
};

export const STALENESS_CHART: ChartDef = {
  id: "staleness",
  title: "Off-policy staleness (model versions behind the trained weights; 0 = on-policy)",
  keys: [...STALENESS_KEYS.staleness, ...STALENESS_KEYS.worst],
  panels: [
    { keys: STALENESS_KEYS.spans, title: "trajectory spans: versions that wrote one answer (1 = one version)" },
    { keys: STALENESS_KEYS.evicted, title: "groups evicted as too stale" },
  ],
  names: (keys) => new Map(keys.map((k) => [k, k.slice(P.length + 1)])),
};

/** verl's asynchronous v1 modes, read from a run's resolved config (engine/config/trainer_mode.py `is_async`). */
export function isAsyncConfig(config: Record<string, unknown> | null | undefined): boolean {
  const trainer = config?.trainer as Record<string, unknown> | undefined;
  const v1 = trainer?.v1 as Record<string, unknown> | undefined;
  return trainer?.use_v1 === true && (v1?.trainer_mode === "colocate_async" || v1?.trainer_mode === "separate_async");
}

/** Did the run ever train off-policy? The sync trainer logs the same metrics at their on-policy values (spans 1,
 *  staleness 0, nothing evicted): a chart of those would be flat lines that say nothing. */
export function loggedOffPolicy(series: ReadonlyMap<string, Series> | undefined): boolean {
  if (!series) return false;
  const over = (keys: string[], floor: number) =>
    keys.some((k) => series.get(k)?.values.some((v) => Number.isFinite(v) && v > floor) ?? false);
  return over([...STALENESS_KEYS.staleness, ...STALENESS_KEYS.worst, ...STALENESS_KEYS.evicted], 0)
    || over(STALENESS_KEYS.spans, 1);
}

/** The Run page's charts: the staleness chart after the first, when the run is asynchronous or trained off-policy. */
export function withStaleness(charts: ChartDef[], show: boolean): ChartDef[] {
  if (!show) return charts;
  return [...charts.slice(0, 1), STALENESS_CHART, ...charts.slice(1)];
}

export interface Versioned {
  step: number;
  policy_versions?: number[] | null;
  policy_version_min?: number | null;
  policy_version_max?: number | null;
  staleness?: number | null;
  staleness_worst?: number | null;
}

/** "v12", or "v11–12" for an answer that crossed a weight update; null when the run recorded no versions. */
export function versionLabel(s: Versioned): string | null {
  const low = s.policy_version_min ?? null;
  const high = s.policy_version_max ?? null;
  if (low === null || high === null) return null;
  return low === high ? `v${high}` : `v${low}–${high}`;
}

/** "on-policy", "1 version stale", "2 versions stale; oldest token 3 behind"; null without versions. */
export function stalenessLabel(s: Versioned): string | null {
  const stale = s.staleness ?? (s.policy_version_max == null ? null : s.step - 1 - s.policy_version_max);
  if (stale === null) return null;
  const worst = s.staleness_worst ?? (s.policy_version_min == null ? stale : s.step - 1 - s.policy_version_min);
  const head = stale <= 0 ? "on-policy" : `${stale} version${stale === 1 ? "" : "s"} stale`;
  return worst !== stale ? `${head}; oldest token ${worst} behind` : head;
}

/** Rows or answers that show the run trained off-policy (some staleness above 0, or an answer written by several
 *  versions): only then are versions worth a column; a synchronous run's are all current. */
export function offPolicyRows(rows: readonly Versioned[]): boolean {
  return rows.some((r) => (r.staleness ?? 0) > 0
    || (r.policy_version_min != null && r.policy_version_max != null && r.policy_version_min !== r.policy_version_max));
}

/** Each token's version for the overlay: the per-token array, or the one version of an answer whose oldest and
 *  newest agree (a summary without the array); null where the run recorded none. */
export function tokenVersions(s: Versioned, tokens: number): (number | null)[] | null {
  if (Array.isArray(s.policy_versions)) return Array.from({ length: tokens }, (_, i) => s.policy_versions![i] ?? null);
  if (s.policy_version_min != null && s.policy_version_min === s.policy_version_max) {
    return Array(tokens).fill(s.policy_version_max);
  }
  return null;
}

/** The overlay's shade of a token: by its age behind the trained weights, 0 (current) clear to `scale` full. */
export function versionAge(step: number, version: number | null): number | null {
  return version === null ? null : step - 1 - version;
}
