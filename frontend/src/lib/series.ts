/**
 * Metric series on the client: the server's (possibly downsampled) series, with live points from SSE merged in,
 * and the same min/max bucketing the server uses when a live series grows past what a chart should hold.
 */

/** Values as the API sends them: JSON numbers, or "NaN" / "Infinity" / "-Infinity" (null = NaN). */
export type ApiValue = number | string | null;

export interface Series {
  steps: number[];
  values: number[]; // NaN / ±Infinity kept; charts draw them as gaps
  walls: number[];
}

export type LivePoint = [key: string, step: number, value: ApiValue, wall: number];

export function toNumber(v: ApiValue | undefined): number {
  if (v === null || v === undefined) return NaN;
  if (typeof v === "number") return v;
  if (v === "Infinity") return Infinity;
  if (v === "-Infinity") return -Infinity;
  const n = Number(v);
  return Number.isNaN(n) ? NaN : n;
}

export function emptySeries(): Series {
  return { steps: [], values: [], walls: [] };
}

/** A series from the API; asked for without wall times (`wall_times=false`), its walls are NaN, one per step. */
export function fromApi(s: { steps: number[]; values: ApiValue[]; wall_times: number[] }): Series {
  const walls = s.wall_times.length === s.steps.length ? s.wall_times.slice() : s.steps.map(() => NaN);
  return { steps: s.steps.slice(), values: s.values.map(toNumber), walls };
}

/**
 * Merge points into a series (mutating it). Returns true when every point landed after the last step
 * (pure append: a chart can extend its traces), false when an earlier step was inserted or replaced.
 */
export function mergePoints(series: Series, points: readonly [number, number, number][]): boolean {
  let appendOnly = true;
  for (const [step, value, wall] of points) {
    const n = series.steps.length;
    if (n === 0 || step > series.steps[n - 1]) {
      series.steps.push(step);
      series.values.push(value);
      series.walls.push(wall);
      continue;
    }
    appendOnly = false;
    const at = lowerBound(series.steps, step);
    if (series.steps[at] === step) {
      series.values[at] = value;
      series.walls[at] = wall;
    } else {
      series.steps.splice(at, 0, step);
      series.values.splice(at, 0, value);
      series.walls.splice(at, 0, wall);
    }
  }
  return appendOnly;
}

function lowerBound(arr: number[], x: number): number {
  let lo = 0;
  let hi = arr.length;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (arr[mid] < x) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/** Group SSE points by key (a `metrics` event carries several keys). */
export function groupByKey(points: readonly LivePoint[]): Map<string, [number, number, number][]> {
  const out = new Map<string, [number, number, number][]>();
  for (const [key, step, value, wall] of points) {
    let list = out.get(key);
    if (!list) out.set(key, (list = []));
    list.push([step, toNumber(value), wall]);
  }
  for (const list of out.values()) list.sort((a, b) => a[0] - b[0]);
  return out;
}

/**
 * Indices of at most `maxPoints` points: the series cut into maxPoints/2 buckets of equal count, each keeping
 * its minimum and maximum (so a spike never vanishes) and a non-finite value if it has one (a NaN loss must
 * stay visible). Same rule as the server's downsampling.
 */
export function minMaxIndices(values: readonly number[], maxPoints: number): number[] {
  const n = values.length;
  if (n <= maxPoints) return Array.from({ length: n }, (_, i) => i);
  const buckets = Math.max(1, Math.floor(maxPoints / 2));
  const keep: number[] = [];
  for (let b = 0; b < buckets; b++) {
    const start = Math.ceil((b * n) / buckets);
    const end = Math.ceil(((b + 1) * n) / buckets);
    if (start >= end) continue;
    let lo = -1;
    let hi = -1;
    let bad = -1;
    for (let i = start; i < end; i++) {
      const v = values[i];
      if (!Number.isFinite(v)) {
        if (bad === -1) bad = i;
        continue;
      }
      if (lo === -1 || v < values[lo]) lo = i;
      if (hi === -1 || v > values[hi]) hi = i;
    }
    const picked = new Set<number>();
    if (bad !== -1) picked.add(bad);
    if (lo !== -1) picked.add(lo);
    if (hi !== -1 && picked.size < 2) picked.add(hi);
    if (picked.size === 0) picked.add(start);
    keep.push(...[...picked].sort((x, y) => x - y));
  }
  return keep;
}

export function downsample(series: Series, maxPoints: number): Series {
  if (series.steps.length <= maxPoints) return series;
  const idx = minMaxIndices(series.values, maxPoints);
  return { steps: idx.map((i) => series.steps[i]), values: idx.map((i) => series.values[i]), walls: idx.map((i) => series.walls[i]) };
}

/** For plotting: non-finite values become null (gaps). */
export function plottable(values: readonly (number | null)[]): (number | null)[] {
  return values.map((v) => (v === null || !Number.isFinite(v) ? null : v));
}

export function lastFinite(series: Series | undefined): { step: number; value: number } | null {
  if (!series) return null;
  for (let i = series.values.length - 1; i >= 0; i--) {
    if (Number.isFinite(series.values[i])) return { step: series.steps[i], value: series.values[i] };
  }
  return null;
}

/** Best (max or min) finite value and its step. */
export function best(series: Series | undefined, mode: "max" | "min"): { step: number; value: number } | null {
  if (!series) return null;
  let found: { step: number; value: number } | null = null;
  series.values.forEach((v, i) => {
    if (!Number.isFinite(v)) return;
    if (!found || (mode === "max" ? v > found.value : v < found.value)) found = { step: series.steps[i], value: v };
  });
  return found;
}
