/** TanStack Query keys, one per API read (queries.ts re-exports them; the prefetcher uses them without loading
 *  React). */
export const qk = {
  allRuns: ["runs"] as const,
  runs: (filters: object) => ["runs", filters] as const,
  run: (id: number) => ["run", id] as const,
  runQueue: (id: number) => ["run-queue", id] as const,
  experiments: ["experiments"] as const,
  schema: ["config-schema"] as const,
  presets: ["presets"] as const,
  metrics: (runIds: number[], keys: string[] | null) => ["metrics", runIds, keys] as const,
  metricKeys: (runIds: number[]) => ["metric-keys", runIds] as const,
  sampleSteps: (runId: number) => ["sample-steps", runId] as const,
  runTools: (runId: number) => ["run-tools", runId] as const,
  samples: (runId: number, params: object) => ["samples", runId, params] as const,
  samplesOf: (runId: number) => ["samples", runId] as const,
  sampleRowsOf: (runId: number) => ["sample-rows", runId] as const,
  sampleRows: (runId: number, params: object) => ["sample-rows", runId, params] as const,
  overlaps: (runId: number, params: object) => ["sample-overlaps", runId, params] as const,
  logs: (runId: number) => ["logs", runId] as const,
  runsColumns: (runIds: number[]) => ["runs-columns", runIds] as const,
  health: (runId: number) => ["health", runId] as const,
};
