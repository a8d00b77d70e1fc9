/**
 * The question of a prompt: the last user turn of a chat-template string, without the template's tokens.
 * Qwen's ChatML (`<|im_start|>user\n…<|im_end|>`), the built-in tiny model's compact form of it
 * (`<|im_start|>Q:…<|im_end|>`) and Llama 3's (`<|start_header_id|>user<|end_header_id|>\n\n…<|eot_id|>`);
 * a prompt without a template is the question as it is. The server's sample rows carry the same text
 * (backend/services/samples.py `question_of`: keep the two in step).
 */

export interface Question {
  /** the last user turn, trimmed (the whole prompt, trimmed, when it has no template) */
  text: string;
  /** the prompt carried chat-template tokens: the raw prompt says more than `text` */
  templated: boolean;
}

// the start of a user turn; its text runs to the next end-of-turn or start-of-turn token
const USER_START = /<\|im_start\|>(?:user\n|Q:)|<\|start_header_id\|>user<\|end_header_id\|>\n*/g;
const TURN_END = /<\|im_end\|>|<\|eot_id\|>|<\|im_start\|>|<\|start_header_id\|>|<\|endoftext\|>/;
// a turn's header (its role) and any other special token: what is left without a user turn
const HEADER = /<\|im_start\|>\w*(?:\n|:)?|<\|start_header_id\|>\w*<\|end_header_id\|>/g;
const SPECIAL = /<\|[a-z_]+\|>/;

export function questionOf(prompt: string | null | undefined): Question {
  const raw = prompt ?? "";
  let last: RegExpMatchArray | null = null;
  for (const m of raw.matchAll(USER_START)) last = m;
  if (last) {
    const rest = raw.slice((last.index ?? 0) + last[0].length);
    const end = rest.search(TURN_END);
    return { text: (end === -1 ? rest : rest.slice(0, end)).trim(), templated: true };
  }
  if (!SPECIAL.test(raw)) return { text: raw.trim(), templated: false };
  // template tokens but no user turn: the text between them, without the roles
  const text = raw.replace(HEADER, " ").replace(new RegExp(SPECIAL.source, "g"), " ");
  return { text: text.replace(/\s+/g, " ").trim(), templated: true };
}
