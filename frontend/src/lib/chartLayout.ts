/**
 * Pure pieces of the chart grid's layout (components/MetricCharts.tsx): number formats, the grouping of series
 * into stacked panels that share the step axis (no secondary y axes), 0/1 flags as steps, lines that would
 * hide each other, and where each panel sits.
 */
import type { PanelDef } from "./charts";

/** The largest finite |value| (0 when there is none). */
export function maxAbs(values: Iterable<number | null>): number {
  let m = 0;
  for (const v of values) if (v !== null && Number.isFinite(v) && Math.abs(v) > m) m = Math.abs(v);
  return m;
}

/**
 * The d3 format of a panel's hover values, from the largest magnitude it shows: SI prefixes with 3
 * significant digits for large numbers (12.8k tokens/s), never below 1 — a loss of "5m" reads as five
 * minutes — where small values keep their decimals (0.00073, 1e-7); 4 significant digits otherwise (0.5, 241.3).
 */
export function valueFormat(max: number): string {
  return max >= 1e4 ? ".3~s" : max > 0 && max < 1e-2 ? ".3~g" : ".4~g";
}

/**
 * Plotly's tick labels for a value axis whose largest |value| is `max`: one SI prefix shared by the ticks of an
 * axis from 10^3 up (12k 12.5k, 1.2M) instead of 1.28e+4, Plotly picking the digits from the tick spacing so
 * zooming in keeps labels distinct. Below 1 no prefix (0.005, not 5m, which reads as minutes): plain decimals,
 * or below 10^-3 exponents on every tick (2e-6).
 */
export function axisNumbers(max: number): Record<string, unknown> {
  if (max >= 1) return AXIS_NUMBERS;
  // tiny values (a learning rate): one notation for every tick (1e-6 9e-7), not 0.000001 beside 9e-7
  return { tickformat: max > 0 && max < 1e-3 ? "~e" : "~g", separatethousands: false };
}

/** The tick labels of an axis of large numbers (see axisNumbers). */
export const AXIS_NUMBERS = { exponentformat: "SI", minexponent: 2, separatethousands: false } as const;

/** A fraction's axis: percent from 0, digits as the ticks need them (0.1% 0.2%, 25% 50%). */
export const PERCENT_AXIS = { tickformat: "~%", rangemode: "tozero" } as const;
/** ...and its hover values: up to 3 decimals of a percent (0.391%). */
export const PERCENT_FORMAT = ".3~%";

/** A number for text (legend notes, bar hovers): 3 significant digits, SI prefix from 10^4 up; below 1 plain
 *  decimals (0.00073, "730µ s" reads badly and "5m" as minutes), an exponent only past 10^-6. */
export function fmtSI(v: number, digits = 3): string {
  if (!Number.isFinite(v)) return String(v);
  const a = Math.abs(v);
  if (a === 0) return "0";
  if (a < 1e4) return String(Number(v.toPrecision(digits)));
  const prefixes = ["p", "n", "µ", "m", "", "k", "M", "G", "T"];
  let exp = Math.max(-4, Math.min(4, Math.floor(Math.log10(a) / 3)));
  let scaled = Number((v / 10 ** (3 * exp)).toPrecision(digits));
  if (Math.abs(scaled) >= 1000 && exp < 4) { // 999.7k rounds to 1000k: 1M
    exp += 1;
    scaled = Number((v / 10 ** (3 * exp)).toPrecision(digits));
  }
  return `${scaled}${prefixes[exp + 4]}`;
}

/** A share (0..1) as a percent for text: whole percents from 1%, one significant digit below (0.04%). */
export function fmtShare(share: number): string {
  const pct = share * 100;
  if (!Number.isFinite(pct) || pct <= 0) return "0%";
  return pct >= 1 ? `${Math.round(pct)}%` : `${Number(pct.toPrecision(1))}%`;
}

export interface Panel {
  keys: string[];
  /** written above the panel; the top panel has none (the chart's title names it) */
  title?: string;
  percent?: boolean;
}

/**
 * The panels of a chart, top to bottom. The main keys are split by scale: sorted by magnitude (largest
 * |value|), a key more than `ratio` times smaller or larger than its cluster's first starts a panel of its own
 * (on one axis it would be a flat line at the bottom of the other's range); the cluster holding the first main
 * key stays on top, keys without a magnitude (all zero, no data) join it. Then each declared panel that has a
 * key (the caller passes only the keys it has). At most `maxPanels`: beyond that the smallest-scale clusters share the last main panel.
 */
export function groupIntoPanels(mainKeys: string[], declared: PanelDef[], magnitude: (key: string) => number,
  ratio = 10, maxPanels = 3): Panel[] {
  const sized = mainKeys.filter((k) => magnitude(k) > 0).sort((a, b) => magnitude(b) - magnitude(a));
  const clusters: string[][] = [];
  for (const k of sized) {
    const last = clusters[clusters.length - 1];
    if (last && magnitude(last[0]) / magnitude(k) <= ratio * (1 + 1e-9)) last.push(k); // 1e-5 / 1e-6 is 10.000000000000002
    else clusters.push([k]);
  }
  const unsized = mainKeys.filter((k) => !(magnitude(k) > 0));
  if (!clusters.length) clusters.push([]);
  // order: the first main key's cluster on top, the others in the order their first key is listed
  const pos = (c: string[]) => Math.min(...c.map((k) => mainKeys.indexOf(k)));
  clusters.sort((a, b) => pos(a) - pos(b));
  clusters[0].push(...unsized);
  const present = declared.filter((p) => p.keys.length);
  const room = Math.max(1, maxPanels - present.length);
  while (clusters.length > room) {
    const extra = clusters.pop()!;
    clusters[clusters.length - 1].push(...extra);
  }
  const byListed = (keys: string[]) => keys.slice().sort((a, b) => mainKeys.indexOf(a) - mainKeys.indexOf(b));
  const out: Panel[] = clusters.filter((c) => c.length).map((c, i) => i === 0 ? { keys: byListed(c) } : { keys: byListed(c), title: byListed(c).join(", ") });
  for (const p of present) out.push({ keys: p.keys, title: p.title, ...(p.percent ? { percent: true } : {}) });
  return out;
}

/**
 * Where each panel sits (paper fractions [bottom, top]), top panel first: the top panel twice the height of
 * each one below it, `gapPx` between panels for the title of the one below.
 */
export function panelDomains(count: number, plotHeightPx: number, gapPx = 22): [number, number][] {
  if (count <= 1) return [[0, 1]];
  const gap = Math.min(0.2, gapPx / Math.max(plotHeightPx, 1));
  const usable = 1 - gap * (count - 1);
  const weights = Array.from({ length: count }, (_, i) => (i === 0 ? 2 : 1));
  const total = weights.reduce((a, b) => a + b, 0);
  const out: [number, number][] = [];
  let top = 1;
  for (const w of weights) {
    const lo = Math.max(0, top - (usable * w) / total);
    out.push([round4(lo), round4(top)]);
    top = lo - gap;
  }
  out[out.length - 1][0] = 0;
  return out;
}

function round4(x: number): number {
  return Math.round(x * 1e4) / 1e4;
}

/** The steps where a 0/1 flag is set (a finite value above 0). */
export function flaggedSteps(steps: readonly number[], values: readonly number[]): number[] {
  const out: number[] = [];
  for (let i = 0; i < steps.length; i++) if (Number.isFinite(values[i]) && values[i] > 0) out.push(steps[i]);
  return out;
}

/**
 * Lines that would hide one another: for each series, the index of the first earlier series with the same
 * steps and the same values (within `rel`, NaN equal to NaN), else -1. Equal actor and critic learning rates,
 * a score equal to the reward, two runs with the same schedule.
 */
export function duplicateOf(series: readonly { steps: readonly number[]; values: readonly number[] }[], rel = 1e-9): number[] {
  const same = (a: number, b: number) => a === b || (Number.isNaN(a) && Number.isNaN(b)) ||
    Math.abs(a - b) <= rel * Math.max(Math.abs(a), Math.abs(b));
  return series.map((s, i) => {
    if (!s.steps.length) return -1;
    for (let j = 0; j < i; j++) {
      const o = series[j];
      if (o.steps.length !== s.steps.length) continue;
      let equal = true;
      for (let k = 0; k < s.steps.length && equal; k++) equal = o.steps[k] === s.steps[k] && same(o.values[k], s.values[k]);
      if (equal) return j;
    }
    return -1;
  });
}

/**
 * The y range of a panel whose values are all one number (to rounding: the EMA of a constant wobbles in its
 * 16th digit): Plotly pads a constant to ±1, which flattens a learning rate of 1e-6 onto 0, and a wobble
 * autoranged gives ticks like 0.99999999999999778µ. Null when the values vary or are all 0.
 */
export function constantRange(values: readonly (readonly (number | null)[])[], log: boolean): [number, number] | null {
  let lo = Infinity;
  let hi = -Infinity;
  for (const ys of values) for (const v of ys) if (v !== null && Number.isFinite(v)) { lo = Math.min(lo, v); hi = Math.max(hi, v); }
  if (!Number.isFinite(lo) || hi - lo > 1e-9 * Math.max(Math.abs(lo), Math.abs(hi)) || (lo === 0 && hi === 0)) return null;
  const mid = (lo + hi) / 2;
  if (log) return mid > 0 ? [Math.log10(mid) - 0.5, Math.log10(mid) + 0.5] : null;
  const pad = Math.abs(mid) * 0.5;
  return [mid - pad, mid + pad];
}

/** Draw a series' points as markers too: a single point draws no line, and a series much sparser than the
 *  chart's longest (a validation every 10 steps) reads better as dots. */
export function wantsMarkers(points: number, longest: number): boolean {
  return points <= 3 || points * 4 <= longest;
}

/**
 * Points per series for a grid of charts `gridPx` wide (styles.css: columns of at least `minColPx`, `gapPx` apart;
 * `chromePx` of card padding and axis margins around each plot): about one per pixel of a plot's width — the
 * server's min/max buckets two pixels wide, as W&B buckets a series to the chart's width. More points than
 * pixels draw nothing new and cost the query, the payload and Plotly's draw. Within [100, 1000].
 */
export function pointsForGrid(gridPx: number, minColPx = 440, gapPx = 11, chromePx = 84): number {
  const cols = Math.max(1, Math.floor((gridPx + gapPx) / (minColPx + gapPx)));
  const plot = (gridPx - gapPx * (cols - 1)) / cols - chromePx;
  return Math.max(100, Math.min(1000, Math.round(plot)));
}
