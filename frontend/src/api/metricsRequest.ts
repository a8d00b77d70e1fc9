/** The chart query of useLiveMetrics as a key and a request, shared with the prefetcher (api/prefetch.ts) so
 *  both build the very same request. */
import * as sdk from "../client/sdk.gen";
import type { MetricSeriesList } from "../client/types.gen";
import { unwrap } from "./client";
import { qk } from "./keys";

export interface MetricsRequest {
  runIds: number[];
  /** null: every key of the one run */
  keys: string[] | null;
  maxPoints: number;
  patterns: string[];
  /** false: the server leaves the wall times out (charts on a step axis) */
  wallTimes: boolean;
}

export function metricsQueryKey(r: MetricsRequest): readonly unknown[] {
  return [...qk.metrics(r.runIds, r.keys), r.maxPoints, r.patterns, r.wallTimes];
}

export function isSingleRun(r: MetricsRequest): boolean {
  return r.runIds.length === 1 && r.keys === null;
}

export function fetchMetrics(r: MetricsRequest): Promise<MetricSeriesList> {
  const common = { max_points: r.maxPoints, ...(r.wallTimes ? {} : { wall_times: false }) };
  return isSingleRun(r)
    ? unwrap(sdk.listRunMetrics({ path: { run_id: r.runIds[0] }, query: common }))
    : unwrap(sdk.queryMetrics({ query: { run_id: r.runIds, key: r.keys ?? [], ...common,
      ...(r.patterns.length ? { key_pattern: r.patterns } : {}) } }));
}
