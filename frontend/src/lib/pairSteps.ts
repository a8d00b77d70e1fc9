/** Side by side when two chosen steps share no prompt: the pair to show instead, and why. */

export interface Pairing {
  a: number;
  b: number;
  split: "train" | "val";
  why: "nearest-train" | "validation";
}

/** The validation steps of runs A and B nearest the chosen steps; in one run, two different ones. */
export function validationPair(aStep: number, bStep: number, aVal: readonly number[], bVal: readonly number[], sameRun: boolean): [number, number] | null {
  if (!aVal.length || !bVal.length) return null;
  const nearest = (list: readonly number[], s: number) => list.reduce((best, v) => (Math.abs(v - s) < Math.abs(best - s) ? v : best), list[0]);
  let a = nearest(aVal, aStep);
  let b = nearest(bVal, bStep);
  if (sameRun && a === b) {
    const sorted = [...aVal].sort((x, y) => x - y);
    if (sorted.length < 2) return null;
    const i = sorted.indexOf(a);
    if (i > 0) a = sorted[i - 1];
    else b = sorted[1];
  }
  return a <= b || !sameRun ? [a, b] : [b, a];
}

export function pairFor(opts: {
  aStep: number; bStep: number; sameRun: boolean;
  /** steps of run A that answered some of B's step's prompts, nearest to it first */
  overlapping: readonly number[];
  aVal: readonly number[]; bVal: readonly number[];
}): Pairing | null {
  const partner = opts.overlapping.find((s) => !(opts.sameRun && s === opts.bStep));
  if (partner !== undefined) return { a: partner, b: opts.bStep, split: "train", why: "nearest-train" };
  const val = validationPair(opts.aStep, opts.bStep, opts.aVal, opts.bVal, opts.sameRun);
  return val ? { a: val[0], b: val[1], split: "val", why: "validation" } : null;
}
