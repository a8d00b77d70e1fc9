/**
 * Side by side pairs answers by `prompt_index` (the data set row). An imported verl dump has none (verl's dumps
 * carry the prompt's text, not its row), so its answers borrow the index of the other pane's answer to the same
 * question: the same question text, or the other side's question found inside this side's prompt (verl decodes
 * its prompts without the template's special tokens, so "user\n…\nassistant" is all that is left of them).
 * Two panes without indices number their questions in the left pane's order.
 */
import { questionOf } from "./question";

export interface Pairable {
  prompt?: string;
  prompt_index?: number | null;
}

const indexed = (s: Pairable) => s.prompt_index !== null && s.prompt_index !== undefined;
const squash = (text: string) => text.replace(/\s+/g, " ").trim();

/** Copies of `a` and `b` where every answer without an index has one it shares with the other pane (if any). */
export function pairByQuestion<T extends Pairable>(a: T[], b: T[]): [T[], T[]] {
  if (a.every(indexed) && b.every(indexed)) return [a, b];
  // the questions with an index, from both panes; where neither has one, the left pane's order numbers them
  const known = new Map<string, number>();
  for (const s of [...a, ...b]) {
    if (!indexed(s)) continue;
    const q = squash(questionOf(s.prompt ?? "").text);
    if (q && !known.has(q)) known.set(q, s.prompt_index!);
  }
  if (known.size === 0) {
    for (const s of a) {
      const q = squash(questionOf(s.prompt ?? "").text);
      if (q && !known.has(q)) known.set(q, known.size);
    }
  }
  const byPrompt = new Map<string, number | null>(); // answers to one prompt share the search
  const find = (prompt = ""): number | null => {
    if (byPrompt.has(prompt)) return byPrompt.get(prompt)!;
    const own = squash(questionOf(prompt).text);
    let found = known.get(own) ?? null;
    if (found === null) {
      const flat = squash(prompt);
      let longest = 0; // the longest question inside this prompt: "What is 1 + 1?" must not claim "… 11 + 1?"
      for (const [q, index] of known) {
        if (q.length > longest && flat.includes(q)) {
          found = index;
          longest = q.length;
        }
      }
    }
    byPrompt.set(prompt, found);
    return found;
  };
  const fill = (side: T[]) => side.map((s) => (indexed(s) ? s : { ...s, prompt_index: find(s.prompt) }));
  return [fill(a), fill(b)];
}
