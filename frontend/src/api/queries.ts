/**
 * Server state: one hook per API read, all through TanStack Query and the generated client. Pages read
 * through these hooks and invalidate through `qk` keys; none calls the SDK for a read itself.
 */
import { keepPreviousData, type QueryClient, useQueries, useQuery } from "@tanstack/react-query";
import { useRef } from "react";
import * as sdk from "../client/sdk.gen";
import type {
  ConfigCheck, ListRunsData, ListSampleRowsData, ListSamplesData, ListStepOverlapsData, RunCreate, RunFork, RunPublic, RunStatus, RunUpdate,
} from "../client/types.gen";
import type { HydraValue } from "../lib/hydraValue";
import type { GrammarRead } from "../lib/schemaForm";
import { unwrap } from "./client";
import { qk } from "./keys";
import { takePrefetched } from "./prefetch";

/** A generated query type with `null` left out of each value (the pages leave a filter out rather than null it). */
type Unset<T> = { [K in keyof T]: Exclude<T[K], null> };

export { qk };

/** A run in one of these may still change: live streams, polling, Cancel instead of Resume. */
export const ACTIVE_STATUSES: readonly RunStatus[] = ["queued", "starting", "running"];

export function isActive(status: RunStatus | string | undefined | null): boolean {
  return (ACTIVE_STATUSES as readonly string[]).includes(status ?? "");
}

export type RunFilters = Unset<Pick<NonNullable<ListRunsData["query"]>, "status" | "experiment_id" | "tag" | "not_tag" | "q">>;

export function useRuns(filters: RunFilters) {
  return useQuery({
    queryKey: qk.runs(filters),
    queryFn: () => unwrap(sdk.listRuns({ query: { ...filters, limit: 500 } })),
    placeholderData: keepPreviousData,
  });
}

export function useRun(id: number | null) {
  return useQuery({
    queryKey: qk.run(id ?? 0),
    queryFn: () => unwrap(sdk.getRun({ path: { run_id: id! } })),
    enabled: id !== null && Number.isFinite(id),
  });
}

/**
 * A run's event stream opened: read the run once more, since a change stored between the page's GET and the stream's
 * start came with no event (its plan, its end). The stream's events since then are newer than that read may be, so
 * they win over it: pass each to `note`.
 */
export function catchUpRun(qc: QueryClient, id: number): { note: (data: Partial<RunPublic>) => void } {
  let newer: Partial<RunPublic> | null = {};
  unwrap(sdk.getRun({ path: { run_id: id } }))
    .then((fresh) => { qc.setQueryData(qk.run(id), { ...fresh, ...newer }); }, () => undefined)
    .finally(() => { newer = null; });
  return { note: (data) => { if (newer) Object.assign(newer, data); } };
}

/** Why a queued or starting run waits (GET /runs/{id}/queue): asked again every few seconds while it does, since
 *  other runs ending move it up and its own stream says nothing of theirs. */
export function useRunQueue(id: number, waiting: boolean) {
  return useQuery({
    queryKey: qk.runQueue(id),
    queryFn: () => unwrap(sdk.getRunQueue({ path: { run_id: id } })),
    enabled: waiting,
    refetchInterval: waiting ? 3000 : false,
  });
}

export function useExperiments() {
  return useQuery({
    queryKey: qk.experiments,
    queryFn: () => unwrap(sdk.listExperiments({ query: { limit: 1000 } })),
    staleTime: 30_000,
  });
}

export function useConfigSchema() {
  return useQuery({
    queryKey: qk.schema,
    queryFn: () => unwrap(sdk.getConfigSchema()),
    staleTime: Infinity,
  });
}

export function usePresets() {
  return useQuery({
    queryKey: qk.presets,
    queryFn: () => unwrap(sdk.listPresets()),
    staleTime: Infinity,
  });
}

export function useMetricKeys(runIds: number[]) {
  return useQuery({
    queryKey: qk.metricKeys(runIds),
    queryFn: () => unwrap(sdk.queryMetricKeys({ query: { run_id: runIds } })),
    enabled: runIds.length > 0,
  });
}

export function useSampleSteps(runId: number | null) {
  return useQuery({
    queryKey: qk.sampleSteps(runId ?? 0),
    queryFn: () => unwrap(sdk.listSampleSteps({ path: { run_id: runId! } })),
    enabled: runId !== null,
  });
}

/** The run's tools: declared by its tool config and/or called in its answers (GET /runs/{id}/tools). */
export function useRunTools(runId: number | null, enabled = true) {
  return useQuery({
    queryKey: qk.runTools(runId ?? 0),
    queryFn: () => unwrap(sdk.listRunTools({ path: { run_id: runId! } })),
    enabled: runId !== null && enabled,
  });
}

/** The Samples page's filters; multi-turn ones from lib/conversation.ts turnQuery. */
export type SampleQuery = Unset<Pick<NonNullable<ListSamplesData["query"]>, "step" | "split" | "q" | "min_score" | "max_score"
  | "data_source" | "prompt_index" | "skip" | "limit" | "order" | "num_turns" | "tool" | "uses_tool" | "tool_error" | "stale"
  | "min_staleness">>;

export function useSamples(runId: number | null, params: SampleQuery, enabled = true) {
  return useQuery({
    queryKey: qk.samples(runId ?? 0, params),
    queryFn: () => unwrap(sdk.listSamples({ path: { run_id: runId! }, query: params })),
    enabled: enabled && runId !== null,
    placeholderData: keepPreviousData,
  });
}

/** Several runs by id (Compare): each shares the cache entry of `useRun`. */
export function useRunsById(ids: number[]) {
  return useQueries({
    queries: ids.map((id) => ({ queryKey: qk.run(id),
      queryFn: () => takePrefetched<RunPublic>(qk.run(id)) ?? unwrap(sdk.getRun({ path: { run_id: id } })) })),
  });
}

/** The last `tail` log lines; new ones arrive over SSE. */
export function useLogHistory(runId: number, tail = 300) {
  return useQuery({
    queryKey: qk.logs(runId),
    queryFn: () => unwrap(sdk.listLogs({ path: { run_id: runId }, query: { tail } })),
    staleTime: Infinity,
  });
}

/** The Runs table's score and KL columns: a few downsampled series of many runs in one request. */
export function useRunsColumns(runIds: number[], keys: string[], poll: boolean) {
  return useQuery({
    queryKey: qk.runsColumns(runIds),
    queryFn: () => unwrap(sdk.queryMetrics({ query: { run_id: runIds, key: keys, max_points: 300 } })),
    enabled: runIds.length > 0,
    refetchInterval: poll ? 5_000 : false,
    placeholderData: (prev) => prev,
  });
}

export type SampleRowQuery = Unset<Pick<NonNullable<ListSampleRowsData["query"]>, "step" | "split" | "q" | "min_score"
  | "max_score" | "data_source" | "limit" | "num_turns" | "tool" | "uses_tool" | "tool_error" | "stale" | "min_staleness">>;

/** Answers as light rows (no prompt, no per-token arrays): the dense table and "What changed". */
export function useSampleRows(runId: number | null, params: SampleRowQuery, enabled = true) {
  return useQuery({
    queryKey: qk.sampleRows(runId ?? 0, params),
    queryFn: () => unwrap(sdk.listSampleRows({ path: { run_id: runId! }, query: params })),
    enabled: enabled && runId !== null,
    placeholderData: keepPreviousData,
  });
}

export type OverlapQuery = Unset<Pick<ListStepOverlapsData["query"], "step" | "split" | "other_run_id" | "other_split">>;

/** Steps that answered some of the prompts of (run, step, split), nearest first. */
export function useStepOverlaps(runId: number | null, params: OverlapQuery | null) {
  return useQuery({
    queryKey: qk.overlaps(runId ?? 0, params ?? {}),
    queryFn: () => unwrap(sdk.listStepOverlaps({ path: { run_id: runId! }, query: params! })),
    enabled: runId !== null && params !== null,
    staleTime: 30_000,
  });
}

/** What the engine resolves a config to (POST /config/validate): the New-run form shows the values a run will use
 *  where it derives or caps them (micro-batches); a config it refuses answers a 422 naming the key, which the form
 *  shows at that field as the user edits. */
export function useConfigPlan(body: ConfigCheck, enabled: boolean) {
  return useQuery({
    queryKey: ["config-plan", body],
    queryFn: () => unwrap(sdk.validateConfig({ body })),
    enabled,
    placeholderData: keepPreviousData,
    staleTime: Infinity,
    retry: false,
  });
}

/** Typed values read by the engine's override grammar (POST /config/values): the form's lists and free-form values,
 *  so the browser has no grammar of its own. `read(text)` is undefined until the server has answered for it. */
export function useGrammarRead(texts: string[]): GrammarRead {
  const unique = [...new Set(texts)].sort();
  const q = useQuery({
    queryKey: ["config-values", unique],
    queryFn: () => unwrap(sdk.readValues({ body: { texts: unique } })),
    enabled: unique.length > 0,
    staleTime: Infinity,
    retry: false,
  });
  const known = useRef(new Map<string, HydraValue>());
  for (const { text, value } of q.data?.values ?? []) known.current.set(text, value as HydraValue);
  return (text) => known.current.get(text);
}

/** The command line that runs these values (POST /config/command, written by the engine's grammar). */
export function useCommandText(values: Record<string, HydraValue>, configName: string | null) {
  return useQuery({
    queryKey: ["config-command", values, configName],
    queryFn: () => unwrap(sdk.writeCommand({ body: { values, config_name: configName } })),
    placeholderData: keepPreviousData,
    staleTime: Infinity,
    retry: false,
  });
}

/** Writes, for `useMutation`: the pages invalidate `qk` keys on success. */
export const runWrites = {
  create: (body: RunCreate) => unwrap(sdk.createRun({ body })),
  fork: (runId: number, body: RunFork) => unwrap(sdk.forkRun({ path: { run_id: runId }, body })),
  cancel: (runId: number) => unwrap(sdk.cancelRun({ path: { run_id: runId } })),
  resume: (runId: number) => unwrap(sdk.resumeRun({ path: { run_id: runId } })),
  update: (runId: number, body: RunUpdate) => unwrap(sdk.updateRun({ path: { run_id: runId }, body })),
  remove: (runId: number) => unwrap(sdk.deleteRun({ path: { run_id: runId } })),
};

/** A pasted command line, read by the server with the engine's own override grammar (no second parser here). */
export const parseCommand = (command: string) => unwrap(sdk.parseCommand({ body: { command } }));

/** Archiving is a tag: the runs list leaves runs with it out unless asked to show them. */
export const ARCHIVED_TAG = "archived";

/** Hand a fetched file to the browser as a download (the request carries the API token like any other). */
function save(blob: Blob, filename: string): void {
  const url = URL.createObjectURL(blob);
  const a = document.createElement("a");
  a.href = url;
  a.download = filename;
  document.body.appendChild(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 10_000);
}

export type SampleExportFormat = "jsonl" | "csv" | "parquet";

/** Files: a run's metrics (one row per step) and its samples as filtered on the Samples page. */
export const downloads = {
  metrics: async (runId: number, format: "csv" | "parquet") =>
    save(await unwrap(sdk.exportMetrics({ path: { run_id: runId }, query: { format }, parseAs: "blob" })) as Blob,
      `run-${runId}-metrics.${format}`),
  samples: async (runId: number, format: SampleExportFormat, filters: SampleQuery) => {
    const { step, split, q, min_score, max_score, data_source, prompt_index, num_turns, tool, uses_tool, tool_error, stale,
      min_staleness } = filters;
    const query = { format, split, q, min_score, max_score, data_source, prompt_index, num_turns, tool, uses_tool, tool_error,
      stale, min_staleness,
      ...(step !== undefined ? { step: [step] } : {}) };
    save(await unwrap(sdk.exportSamples({ path: { run_id: runId }, query, parseAs: "blob" })) as Blob,
      `run-${runId}-samples${step !== undefined ? `-step-${step}` : ""}.${format}`);
  },
};
