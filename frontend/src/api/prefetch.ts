/**
 * Requests sent before React boots. src/prefetchNow.ts, a chunk index.html loads first, runs the page's prefetcher,
 * so its requests leave while the rest of the bundle runs and the first render happens (on the Compare page that
 * was ~0.5 s of boot before the chart query was sent); the query that would send the same request takes the
 * promise instead, once.
 */
const pending = new Map<string, { at: number; promise: Promise<unknown> }>();

/** a promise older than this is not taken: the page it was for was left, and a later visit wants fresh data */
const FRESH_MS = 10_000;

export function prefetch(key: readonly unknown[], start: () => Promise<unknown>): void {
  const promise = start();
  promise.catch(() => undefined); // a failure is the query's to report, when it takes the promise
  pending.set(JSON.stringify(key), { at: performance.now(), promise });
}

/** The prefetched request for this query key, if one was sent and not yet taken. */
export function takePrefetched<T>(key: readonly unknown[]): Promise<T> | undefined {
  const k = JSON.stringify(key);
  const hit = pending.get(k);
  pending.delete(k);
  return hit && performance.now() - hit.at < FRESH_MS ? (hit.promise as Promise<T>) : undefined;
}
