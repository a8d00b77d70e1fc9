/**
 * Metric series for charts: the server's downsampled history (TanStack Query) plus live points from each
 * active run's SSE stream, merged in place. `version` changes on every merge (charts extend their traces),
 * `epoch` when history was replaced or reordered (charts redraw).
 */
import { useQuery } from "@tanstack/react-query";
import { useEffect, useRef, useState } from "react";
import { downsample, fromApi, groupByKey, mergePoints, type LivePoint, type Series } from "../lib/series";
import { openEventStream } from "./live";
import { fetchMetrics, isSingleRun, metricsQueryKey, type MetricsRequest } from "./metricsRequest";
import { takePrefetched } from "./prefetch";

export type RunSeries = Map<string, Series>;

export interface MetricStore {
  byRun: Map<number, RunSeries>;
  version: number;
  epoch: number;
  loading: boolean;
  error: Error | null;
}

const LIVE_LOG_CAP = 200_000;

/** At most this many live streams per page: browsers allow ~6 HTTP/1.1 connections per host. */
export const MAX_LIVE_STREAMS = 4;

export type OnRunEvent = (runId: number, kind: string, data: unknown) => void;
const OTHER_KINDS = ["status", "progress", "logs", "samples", "health"];

/** `keys` (null: every key of the one run) plus, optionally, every key matching one of `keyPatterns`: the
 *  server expands the patterns, so a page of charts needs one request and no list of keys first. `wallTimes`
 *  false: the history comes without wall times (a third of the payload; charts on a step axis): the series'
 *  `walls` are NaN until live points bring theirs. */
export function useLiveMetrics(runIds: number[], keys: string[] | null, liveRunIds: number[], maxPoints = 1000,
  onEvent?: OnRunEvent, keyPatterns: RegExp[] = [], wallTimes = true): MetricStore {
  const onEventRef = useRef(onEvent);
  onEventRef.current = onEvent;
  const request: MetricsRequest = { runIds, keys, maxPoints, patterns: keyPatterns.map((r) => r.source), wallTimes };
  const single = isSingleRun(request);
  const queryKey = metricsQueryKey(request);
  const query = useQuery({
    queryKey,
    // sent before React booted, when the page's prefetcher could (pages/compare/prefetch.ts)
    queryFn: () => takePrefetched<Awaited<ReturnType<typeof fetchMetrics>>>(queryKey) ?? fetchMetrics(request),
    enabled: runIds.length > 0 && (keys === null ? single : keys.length > 0 || request.patterns.length > 0),
    staleTime: Infinity,
    refetchOnWindowFocus: false,
  });
  const store = useRef<Map<number, RunSeries>>(new Map());
  const liveLog = useRef<Map<number, LivePoint[]>>(new Map());
  const [version, setVersion] = useState(0);
  const [epoch, setEpoch] = useState(0);
  const frame = useRef<number | null>(null);
  const dirtyEpoch = useRef(false);
  const keySet = keys ? new Set(keys) : null;
  const wantsKey = keySet ? (k: string) => keySet.has(k) || keyPatterns.some((r) => r.test(k)) : () => true;
  const wantsRef = useRef(wantsKey);
  wantsRef.current = wantsKey;

  const schedule = (reset: boolean) => {
    if (reset) dirtyEpoch.current = true;
    if (frame.current !== null) return;
    frame.current = requestAnimationFrame(() => {
      frame.current = null;
      if (dirtyEpoch.current) {
        dirtyEpoch.current = false;
        setEpoch((e) => e + 1);
      }
      setVersion((v) => v + 1);
    });
  };

  const apply = (runId: number, points: LivePoint[], onlyAfterHistory: boolean): boolean => {
    let run = store.current.get(runId);
    if (!run) store.current.set(runId, (run = new Map()));
    let appendOnly = true;
    for (const [key, list] of groupByKey(points)) {
      if (!wantsRef.current(key)) continue;
      let s = run.get(key);
      if (!s) run.set(key, (s = { steps: [], values: [], walls: [] }));
      const last = s.steps.length ? s.steps[s.steps.length - 1] : -Infinity;
      const pts = onlyAfterHistory ? list.filter((p) => p[0] > last) : list;
      if (!mergePoints(s, pts)) appendOnly = false;
      if (s.steps.length > 2 * maxPoints) {
        run.set(key, downsample(s, maxPoints));
        appendOnly = false;
      }
    }
    return appendOnly;
  };

  // history arrived: rebuild, then re-apply what streamed in meanwhile
  useEffect(() => {
    if (!query.data) return;
    const next = new Map<number, RunSeries>();
    for (const s of query.data.data) {
      let run = next.get(s.run_id);
      if (!run) next.set(s.run_id, (run = new Map()));
      run.set(s.key, fromApi(s));
    }
    store.current = next;
    for (const [runId, points] of liveLog.current) apply(runId, points, true);
    schedule(true);
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, [query.data]);

  const liveKey = liveRunIds.slice(0, MAX_LIVE_STREAMS).join(",");
  const { refetch } = query;
  useEffect(() => {
    if (!liveKey) return;
    const closers = liveKey.split(",").map(Number).map((runId) => {
      let first = true;
      return openEventStream(`/api/v1/runs/${runId}/events`, ["hello", "metrics", ...OTHER_KINDS], (kind, data) => {
        if (kind === "hello") {
          // history fetched before the stream opened may miss points: fetch it again once, now that we listen
          if (first) void refetch();
          first = false;
          onEventRef.current?.(runId, kind, data); // the page's other server state may refetch likewise (health)
        } else if (kind === "metrics") {
          const points = (data as { points: LivePoint[] }).points;
          let log = liveLog.current.get(runId);
          if (!log) liveLog.current.set(runId, (log = []));
          if (log.length < LIVE_LOG_CAP) log.push(...points);
          const appendOnly = apply(runId, points, false);
          schedule(!appendOnly);
        } else {
          onEventRef.current?.(runId, kind, data);
        }
      }, { unparsed: "null" });
    });
    return () => closers.forEach((close) => close());
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, [liveKey, refetch]);

  useEffect(() => () => {
    if (frame.current !== null) cancelAnimationFrame(frame.current);
  }, []);

  return { byRun: store.current, version, epoch, loading: query.isLoading, error: query.error };
}
