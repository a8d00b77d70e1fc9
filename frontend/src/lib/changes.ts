/**
 * "What changed" between two validations: which prompts became solved, which were lost, and a per-prompt
 * strip over every validation of a run to spot prompts that flip back and forth. A prompt counts as solved
 * at a step when the mean score of its answers there reaches the threshold.
 */

export interface ValRow {
  step: number;
  prompt_index?: number | null;
  score?: number | null;
  first_line?: string;
  /** the prompt's question (the server's sample rows carry it) */
  question?: string;
  // multi-turn runs
  num_turns?: number | null;
  tools?: string[] | null;
  tool_error?: boolean | null;
}

export interface PromptResult {
  prompt: number;
  score: number;
  solved: boolean;
  answer: string;
  question: string;
  /** multi-turn runs: of the prompt's answers, how many called a tool and how many had a tool call fail */
  tool?: { answers: number; used: number; errors: number };
}

/** Per prompt at one step: the mean score of its answers and whether that counts as solved (and, for
 * multi-turn runs, how many of its answers used a tool). */
export function resultsAt(rows: readonly ValRow[], step: number, threshold: number): Map<number, PromptResult> {
  const acc = new Map<number, { sum: number; n: number; answer: string; question: string; multi: boolean; used: number; errors: number }>();
  for (const r of rows) {
    if (r.step !== step || r.prompt_index === null || r.prompt_index === undefined) continue;
    if (r.score === null || r.score === undefined || Number.isNaN(r.score)) continue;
    const e = acc.get(r.prompt_index) ?? { sum: 0, n: 0, answer: r.first_line ?? "", question: r.question ?? "", multi: false, used: 0, errors: 0 };
    e.sum += r.score;
    e.n += 1;
    if (r.num_turns !== null && r.num_turns !== undefined) {
      e.multi = true;
      if (r.tools?.length) e.used += 1;
      if (r.tool_error) e.errors += 1;
    }
    acc.set(r.prompt_index, e);
  }
  const out = new Map<number, PromptResult>();
  for (const [prompt, e] of acc) {
    const score = e.sum / e.n;
    out.set(prompt, { prompt, score, solved: score >= threshold, answer: e.answer, question: e.question,
      ...(e.multi ? { tool: { answers: e.n, used: e.used, errors: e.errors } } : {}) });
  }
  return out;
}

export type ChangeKind = "newly-solved" | "newly-failed" | "both" | "neither";

export interface PromptChange {
  prompt: number;
  kind: ChangeKind;
  a: PromptResult;
  b: PromptResult;
  /** score at B − score at A: "most improved" sorts by it */
  delta: number;
}

export function compare(a: Map<number, PromptResult>, b: Map<number, PromptResult>): { changes: PromptChange[]; counts: Record<ChangeKind, number>; onlyOne: number } {
  const counts: Record<ChangeKind, number> = { "newly-solved": 0, "newly-failed": 0, both: 0, neither: 0 };
  const changes: PromptChange[] = [];
  let onlyOne = 0;
  for (const [prompt, ra] of a) {
    const rb = b.get(prompt);
    if (!rb) {
      onlyOne++;
      continue;
    }
    const kind: ChangeKind = ra.solved && rb.solved ? "both" : !ra.solved && !rb.solved ? "neither" : rb.solved ? "newly-solved" : "newly-failed";
    counts[kind]++;
    changes.push({ prompt, kind, a: ra, b: rb, delta: rb.score - ra.score });
  }
  for (const prompt of b.keys()) if (!a.has(prompt)) onlyOne++;
  changes.sort((x, y) => x.prompt - y.prompt);
  return { changes, counts, onlyOne };
}

export type ChangeSort = "improved" | "regressed" | "prompt";

export function sortChanges(changes: readonly PromptChange[], by: ChangeSort): PromptChange[] {
  const out = [...changes];
  if (by === "improved") out.sort((x, y) => y.delta - x.delta || x.prompt - y.prompt);
  else if (by === "regressed") out.sort((x, y) => x.delta - y.delta || x.prompt - y.prompt);
  else out.sort((x, y) => x.prompt - y.prompt);
  return out;
}

export interface Strip {
  prompt: number;
  /** per validation step (in `steps` order): solved, failed, or null when the prompt was not asked there */
  marks: (boolean | null)[];
  /** solved ↔ failed changes between consecutive validations that asked it */
  flips: number;
}

/** One strip per prompt over the run's validations, most flips first. */
export function strips(rows: readonly ValRow[], steps: readonly number[], threshold: number): Strip[] {
  const per = steps.map((s) => resultsAt(rows, s, threshold));
  const prompts = new Set<number>();
  for (const m of per) for (const p of m.keys()) prompts.add(p);
  const out: Strip[] = [];
  for (const prompt of prompts) {
    const marks = per.map((m) => (m.has(prompt) ? m.get(prompt)!.solved : null));
    const seen = marks.filter((v): v is boolean => v !== null);
    let flips = 0;
    for (let i = 1; i < seen.length; i++) if (seen[i] !== seen[i - 1]) flips++;
    out.push({ prompt, marks, flips });
  }
  return out.sort((x, y) => y.flips - x.flips || x.prompt - y.prompt);
}
