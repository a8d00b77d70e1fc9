/** Server state: one hook per API read, all through TanStack Query and the generated client. */
import { keepPreviousData, useQuery } from "@tanstack/react-query";
import * as sdk from "../client/sdk.gen";
import type { RunStatus } from "../client/types.gen";
import { unwrap } from "./client";

export const qk = {
  runs: (filters: object) => ["runs", filters] as const,
  run: (id: number) => ["run", id] as const,
  experiments: ["experiments"] as const,
  schema: ["config-schema"] as const,
  presets: ["presets"] as const,
  metrics: (runIds: number[], keys: string[] | null) => ["metrics", runIds, keys] as const,
  metricKeys: (runIds: number[]) => ["metric-keys", runIds] as const,
  sampleSteps: (runId: number) => ["sample-steps", runId] as const,
  samples: (runId: number, params: object) => ["samples", runId, params] as const,
  logs: (runId: number) => ["logs", runId] as const,
};

export interface RunFilters {
  status?: RunStatus[];
  experiment_id?: number;
  tag?: string[];
  q?: string;
}

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

export interface SampleQuery {
  step?: number;
  split?: "train" | "val";
  q?: string;
  min_score?: number;
  max_score?: number;
  data_source?: string;
  prompt_index?: number;
  skip?: number;
  limit?: number;
  order?: "step" | "-step" | "score" | "-score" | "prompt_index" | "id";
}

export function useSamples(runId: number | null, params: SampleQuery, enabled = true) {
  return useQuery({
    queryKey: qk.samples(runId ?? 0, params),
    queryFn: () => unwrap(sdk.listSamples({ path: { run_id: runId! }, query: params })),
    enabled: enabled && runId !== null,
    placeholderData: keepPreviousData,
  });
}
