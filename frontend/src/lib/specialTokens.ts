/** A chat template's special token (`<|im_end|>`, `<|eot_id|>`, `<|endoftext|>`, …): shown as a small named marker,
 * never as its raw text, which reads as markup in the middle of an answer. Its raw form stays in the tooltip. */
const SPECIAL_TOKEN = /^<\|[A-Za-z0-9_]+\|>$|^<\/?s>$/;
const SPECIAL_NAMES: Record<string, string> = {
  "<|im_end|>": "end of turn", "<|eot_id|>": "end of turn", "<|end|>": "end of turn", "<|endoftext|>": "end of text",
  "</s>": "end of text", "<|im_start|>": "turn start", "<|end_of_text|>": "end of text",
};

export function specialTokenLabel(tok: string): string | null {
  if (!SPECIAL_TOKEN.test(tok)) return null;
  return SPECIAL_NAMES[tok] ?? tok.replace(/^<\|?\/?|\|?>$/g, "").replace(/_/g, " ");
}

/** Text split into plain runs and chat-template tokens (a multi-turn turn's text keeps them: `…<|im_end|>`). */
export function splitSpecial(text: string): { text: string; special: string | null }[] {
  const out: { text: string; special: string | null }[] = [];
  let last = 0;
  for (const m of text.matchAll(/<\|[A-Za-z0-9_]+\|>/g)) {
    const at = m.index ?? 0;
    if (at > last) out.push({ text: text.slice(last, at), special: null });
    out.push({ text: m[0], special: specialTokenLabel(m[0]) });
    last = at + m[0].length;
  }
  if (last < text.length) out.push({ text: text.slice(last), special: null });
  return out;
}
