/**
 * Exponential moving average as TensorBoard draws it: debiased (the first points are not pulled toward 0),
 * `weight` in [0, 1) (0 = no smoothing). Non-finite values pass through unsmoothed and do not poison the
 * average, so a NaN stays visible where it happened.
 */
export function ema(values: readonly (number | null)[], weight: number): (number | null)[] {
  if (weight <= 0) return values.slice();
  const w = Math.min(weight, 0.999);
  const out: (number | null)[] = new Array(values.length);
  let last = 0;
  let count = 0;
  for (let i = 0; i < values.length; i++) {
    const v = values[i];
    if (v === null || !Number.isFinite(v)) {
      out[i] = v;
      continue;
    }
    last = last * w + (1 - w) * v;
    count++;
    out[i] = last / (1 - Math.pow(w, count));
  }
  return out;
}

/** Incremental form for streaming: feed new points, get their smoothed values; state carries over. */
export class EmaState {
  private last = 0;
  private count = 0;
  constructor(readonly weight: number) {}
  push(v: number | null): number | null {
    if (this.weight <= 0 || v === null || !Number.isFinite(v)) return v;
    const w = Math.min(this.weight, 0.999);
    this.last = this.last * w + (1 - w) * v;
    this.count++;
    return this.last / (1 - Math.pow(w, this.count));
  }
}
