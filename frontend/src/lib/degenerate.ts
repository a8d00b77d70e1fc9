/**
 * One answer's "degenerate" mark on its sample card (empty, or one token / phrase over and over). A reading aid
 * for the answer in front of you, not an alarm: whether a run's answers have degenerated (the share per step,
 * when it fires, its thresholds) is judged by the server (run health, api/health.ts), which also links to the
 * answers that show it. Kept in the browser because the card needs it per answer and the samples API carries
 * no per-answer verdict.
 */
const REPEAT_RUN = 8; // the same token this many times in a row
const REPEAT_NGRAM = 3; // or the most frequent 3-gram covering more than REPEAT_COVERAGE of the answer
const REPEAT_COVERAGE = 0.5;
const REPEAT_MIN_TOKENS = 12; // (only judged on answers of at least this many tokens)

export interface AnswerLike {
  response?: string | null;
  tokens?: string[] | null;
}

/** Why an answer is degenerate, or null: empty, or repetitive. */
export function degenerateReason(sample: AnswerLike): string | null {
  const response = sample.response ?? "";
  if (response.trim() === "") return "empty answer";
  const tokens = sample.tokens && sample.tokens.length ? sample.tokens : response.split(/\s+/).filter(Boolean);
  let run = 1;
  for (let i = 1; i < tokens.length; i++) {
    run = tokens[i] === tokens[i - 1] ? run + 1 : 1;
    if (run >= REPEAT_RUN) return `token "${tokens[i]}" repeated ${run}+ times`;
  }
  if (tokens.length >= REPEAT_MIN_TOKENS) {
    const counts = new Map<string, number>();
    for (let i = 0; i + REPEAT_NGRAM <= tokens.length; i++) {
      const gram = tokens.slice(i, i + REPEAT_NGRAM).join("\u0000");
      counts.set(gram, (counts.get(gram) ?? 0) + 1);
    }
    const top = Math.max(0, ...counts.values());
    if ((top * REPEAT_NGRAM) / tokens.length > REPEAT_COVERAGE) return "repeats the same phrase";
  }
  return null;
}
