/**
 * Run health, judged by the server (issue 28): `GET /api/v1/runs/{id}/health`, pushed again as the `health`
 * event on the run's SSE stream whenever it changes; the runs list carries a summary per run (`health`), which
 * the runs feed's `health` event ({id, health}) replaces. The browser computes no alarm: it shows this state.
 */
import { useQuery, useQueryClient, type QueryClient } from "@tanstack/react-query";
import * as sdk from "../client/sdk.gen";
import type { HealthAlarmPublic, HealthSummary, RunHealth } from "../client/types.gen";
import { unwrap } from "./client";
import { qk } from "./queries";

export type { RunHealth };
export type HealthAlarm = HealthAlarmPublic;
export type RunHealthSummary = HealthSummary;

const STATUSES: readonly string[] = ["ok", "warning", "error"];

/** An SSE event's data is parsed JSON of any shape: only a health body replaces the cached one. */
export function isRunHealth(data: unknown): data is RunHealth {
  const d = data as RunHealth | null;
  return !!d && typeof d === "object" && STATUSES.includes(d.status) && Array.isArray(d.alarms);
}

/** True when `a` was judged over fewer steps than `b`: states only move forward, so `a` is the older one. */
export function olderThan(a: RunHealth, b: RunHealth): boolean {
  return (a.checked_step ?? -1) < (b.checked_step ?? -1);
}

export function useRunHealth(runId: number) {
  const qc = useQueryClient();
  return useQuery({
    queryKey: qk.health(runId),
    queryFn: async () => {
      const fetched = await unwrap(sdk.getRunHealth({ path: { run_id: runId } }));
      // a fetch sent before a change the stream then pushed answers with the older state: keep the newer one
      const cached = qc.getQueryData<RunHealth>(qk.health(runId));
      return cached && olderThan(fetched, cached) ? cached : fetched;
    },
  });
}

/** The run stream's events, for the page that holds the stream (one EventSource per run, api/live.ts):
 *  `health` carries the GET's body and replaces the cached state. `hello` (the stream opened) refetches, since
 *  a state fetched before the stream listened may have missed a change; so does `status`, since the page
 *  closes the stream when the run ends and a last judgement may come with the end. */
export function onHealthStreamEvent(qc: QueryClient, runId: number, kind: string, data: unknown): void {
  if (kind === "health" && isRunHealth(data) && data.run_id === runId) {
    const cached = qc.getQueryData<RunHealth>(qk.health(runId));
    if (!cached || !olderThan(data, cached)) qc.setQueryData(qk.health(runId), data);
  }
  else if (kind === "hello" || kind === "status") void qc.invalidateQueries({ queryKey: qk.health(runId) });
}
