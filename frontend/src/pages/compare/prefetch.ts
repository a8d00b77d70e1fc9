/**
 * What the Compare page asks the server for, derived from the URL and the window alone, so that
 * src/prefetchNow.ts can send it before React boots (api/prefetch.ts): the runs and the one chart query.
 */
import * as sdk from "../../client/sdk.gen";
import { unwrap } from "../../api/client";
import type { MetricsRequest } from "../../api/metricsRequest";
import { fetchMetrics, metricsQueryKey } from "../../api/metricsRequest";
import { prefetch } from "../../api/prefetch";
import { qk } from "../../api/keys";
import { pointsForGrid } from "../../lib/chartLayout";
import { chartOptionsOf } from "../../lib/chartOptions";
import { chartQuery, COMPARE_CHARTS } from "../../lib/charts";
import { withStaleness } from "../../lib/staleness";

// the staleness keys are always asked for (absent for most runs); the chart is drawn when one of the runs is async
export const COMPARE_QUERY = chartQuery(withStaleness(COMPARE_CHARTS, true));

export function compareRunIds(params: URLSearchParams): number[] {
  return (params.get("runs") ?? "").split(",").map(Number).filter((n) => Number.isFinite(n) && n > 0);
}

/** about a point per pixel of a chart's width (main is at most 1600 px wide, 1.2rem padded): no more than it can show */
export function compareMaxPoints(): number {
  return pointsForGrid(Math.min(window.innerWidth, 1600) - 34);
}

export function compareMetricsRequest(ids: number[], maxPoints: number, xAxis: "step" | "time"): MetricsRequest {
  return { runIds: ids, keys: COMPARE_QUERY.keys, maxPoints, patterns: COMPARE_QUERY.patterns.map((r) => r.source),
    wallTimes: xAxis === "time" };
}

/** On /compare?runs=..: send the page's requests now. */
export function prefetchCompare(): void {
  if (location.pathname !== "/compare") return;
  const params = new URLSearchParams(location.search);
  const ids = compareRunIds(params);
  if (!ids.length) return;
  const request = compareMetricsRequest(ids, compareMaxPoints(), chartOptionsOf(params).xAxis);
  prefetch(metricsQueryKey(request), () => fetchMetrics(request));
  for (const id of ids) prefetch(qk.run(id), () => unwrap(sdk.getRun({ path: { run_id: id } })));
}
