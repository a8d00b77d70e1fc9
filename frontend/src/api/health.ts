/**
 * Run health, judged by the server (issue 28): `GET /api/v1/runs/{id}/health`, pushed again as the `health`
 * event on the run's SSE stream whenever it changes; the runs list carries a summary per run (`health`), which
 * the runs feed's `health` event ({id, health}) replaces. The browser computes no alarm: it shows this state.
 *
 * Hand-typed to the contract agreed with the backend (the generated client does not have the route yet); when
 * `npm run gen:client` brings it, these types can be picked from types.gen like queries.ts does.
 */
import { useQuery, type QueryClient } from "@tanstack/react-query";
import { client } from "../client/client.gen";
import { ApiError, unwrap } from "./client";
import { qk } from "./queries";

export type HealthStatus = "ok" | "warning" | "error";

export interface HealthAlarm {
  id: string; // stable kind, e.g. "kl-high"
  severity: "warning" | "error";
  state: "firing" | "cleared";
  title: string;
  detail: string;
  key: string | null; // the metric it reads, when one
  since_step: number;
  cleared_step: number | null;
  values: Record<string, number>; // the numbers that triggered it
  samples: { step: number; filter: string | null } | null; // the answers that show it
}

export interface RunHealth {
  run_id: number;
  status: HealthStatus;
  checked_step: number | null;
  alarms: HealthAlarm[];
  thresholds: Record<string, number>;
}

/** What a runs-list item carries: the state and the ids of the alarms firing now. */
export interface RunHealthSummary {
  status: HealthStatus;
  firing: string[];
}

const STATUSES: readonly string[] = ["ok", "warning", "error"];

export function isRunHealth(data: unknown): data is RunHealth {
  const d = data as RunHealth | null;
  return !!d && typeof d === "object" && STATUSES.includes(d.status) && Array.isArray(d.alarms);
}

/** A runs-list item's health summary, or null where the server sends none (a backend without health). */
export function healthSummary(run: object): RunHealthSummary | null {
  const h = (run as { health?: RunHealthSummary | null }).health;
  return h && STATUSES.includes(h.status) && Array.isArray(h.firing) ? h : null;
}

/** The run's health; null where the server has no health route (404 on a run that exists): nothing to show. */
export async function fetchRunHealth(runId: number): Promise<RunHealth | null> {
  try {
    return await unwrap(client.get<{ 200: RunHealth }, unknown, false>({
      url: "/api/v1/runs/{run_id}/health", path: { run_id: runId },
    }));
  } catch (e) {
    if (e instanceof ApiError && e.status === 404) return null;
    throw e;
  }
}

export function useRunHealth(runId: number) {
  return useQuery({ queryKey: qk.health(runId), queryFn: () => fetchRunHealth(runId) });
}

/** The run stream's events, for the page that holds the stream (one EventSource per run, api/live.ts):
 *  `health` carries the GET's body and replaces the cached state. `hello` (the stream opened) refetches, since
 *  a state fetched before the stream listened may have missed a change; so does `status`, since the page
 *  closes the stream when the run ends and a last judgement may come with the end. */
export function onHealthStreamEvent(qc: QueryClient, runId: number, kind: string, data: unknown): void {
  if (kind === "health" && isRunHealth(data) && data.run_id === runId) qc.setQueryData(qk.health(runId), data);
  else if (kind === "hello" || kind === "status") void qc.invalidateQueries({ queryKey: qk.health(runId) });
}
