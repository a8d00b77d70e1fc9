/** What the Samples page's count line says: which answers of the step are on the page, and how they group. */

const plural = (n: number, word: string) => `${n.toLocaleString("en-US")} ${word}${n === 1 ? "" : "s"}`;

/**
 * `total` answers match the filters; the page (`pageSize` a page) shows `shown` of them from `skip` on, in groups
 * (one per prompt asked, each with its answers) of `groupSizes`. E.g. "answers 1–200 of 256 (page 1 of 2) · on this page:
 * 200 prompts, 1 answer each".
 */
export function pageSummary(total: number, pageSize: number, skip: number, shown: number, groupSizes: readonly number[]): string {
  const head = shown >= total ? `${plural(total, "answer")}` : `answers ${skip + 1}–${skip + shown} of ${total.toLocaleString("en-US")}`
    + ` (page ${Math.floor(skip / pageSize) + 1} of ${Math.ceil(total / pageSize)})`;
  if (groupSizes.length === 0) return head;
  const lo = Math.min(...groupSizes);
  const hi = Math.max(...groupSizes);
  const each = lo === hi ? `${plural(lo, "answer")} each` : `${lo}–${hi} answers each`;
  return `${head}${shown >= total ? " to" : " · on this page:"} ${plural(groupSizes.length, "prompt")}, ${each}`;
}

export interface StepCount {
  step: number;
  split: string;
  count: number;
}

export interface Arrival {
  /** every answer of the step is in */
  complete: boolean;
  /** how many the step should have, when known (its predecessor's count): "64 of 256 arrived" */
  expected: number | null;
}

const order = (s: { step: number; split: string }) => s.step * 2 + (s.split === "val" ? 1 : 0);
export const stepId = (s: { step: number; split: string }) => `${s.split}:${s.step}`;

/**
 * Which steps have all their answers. The engine's logger sends a step's answers (train, then val) in order, a
 * few dozen a request, before any of a later step's: a step is complete once anything after it has arrived, once
 * the run no longer trains (`active` false), or once it has as many answers as the step before it of its split.
 */
export function arrivals(steps: readonly StepCount[], active: boolean): Map<string, Arrival> {
  const newest = Math.max(-1, ...steps.map(order));
  const out = new Map<string, Arrival>();
  const previous = new Map<string, number>();
  for (const s of [...steps].sort((a, b) => order(a) - order(b))) {
    const expected = previous.get(s.split) ?? null;
    const complete = !active || order(s) < newest || (expected !== null && s.count >= expected);
    out.set(stepId(s), { complete, expected: complete ? null : expected });
    previous.set(s.split, s.count);
  }
  return out;
}

/** The step a page that follows the run shows: the newest complete one, else (none is yet) the newest. */
export function newestComplete(steps: readonly StepCount[], arrived: Map<string, Arrival>): number {
  for (let i = steps.length - 1; i >= 0; i--) if (arrived.get(stepId(steps[i]))?.complete) return i;
  return steps.length - 1;
}

/** The step's count line: "256 answers", or while it arrives "64 of 256 answers so far" / "64 answers so far". */
export function countLine(count: number, arrival: Arrival | undefined): string {
  if (!arrival || arrival.complete) return plural(count, "answer");
  return arrival.expected !== null ? `${count.toLocaleString("en-US")} of ${plural(arrival.expected, "answer")} so far`
    : `${plural(count, "answer")} so far`;
}
