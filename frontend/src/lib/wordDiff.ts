/**
 * Word-level diff of two texts (LCS over word and whitespace tokens). Whitespace differences alone are
 * not highlighted: the parts are aligned on words, and spaces follow the side they belong to.
 */

export type DiffOp = "same" | "added" | "removed";

export interface DiffPart {
  op: DiffOp;
  text: string;
}

/** Words, runs of whitespace and single punctuation marks, in order; joining them gives the text back. */
export function tokenize(text: string): string[] {
  return text.match(/\s+|[\p{L}\p{N}_]+|[^\s\p{L}\p{N}_]/gu) ?? [];
}

const MAX_CELLS = 4_000_000; // ~16 MB of Int32: beyond that, diff coarser (by lines) to stay fast

export function wordDiff(a: string, b: string): DiffPart[] {
  const left = tokenize(a);
  const right = tokenize(b);
  if ((left.length + 1) * (right.length + 1) > MAX_CELLS) return lineDiff(a, b);
  return merge(lcsDiff(left, right));
}

function lineDiff(a: string, b: string): DiffPart[] {
  const split = (t: string) => t.match(/[^\n]*\n|[^\n]+$/g) ?? [];
  const left = split(a);
  const right = split(b);
  if ((left.length + 1) * (right.length + 1) > MAX_CELLS) {
    return merge([{ op: "removed", text: a }, { op: "added", text: b }]);
  }
  return merge(lcsDiff(left, right));
}

function lcsDiff(a: string[], b: string[]): DiffPart[] {
  // common prefix/suffix first: the usual case (two answers that mostly agree) gets cheap
  let start = 0;
  while (start < a.length && start < b.length && a[start] === b[start]) start++;
  let endA = a.length;
  let endB = b.length;
  while (endA > start && endB > start && a[endA - 1] === b[endB - 1]) {
    endA--;
    endB--;
  }
  const midA = a.slice(start, endA);
  const midB = b.slice(start, endB);
  const n = midA.length;
  const m = midB.length;
  const table = new Int32Array((n + 1) * (m + 1)); // table[i][j] = LCS of midA[i:], midB[j:]
  const w = m + 1;
  for (let i = n - 1; i >= 0; i--) {
    for (let j = m - 1; j >= 0; j--) {
      table[i * w + j] = midA[i] === midB[j]
        ? table[(i + 1) * w + j + 1] + 1
        : Math.max(table[(i + 1) * w + j], table[i * w + j + 1]);
    }
  }
  const parts: DiffPart[] = a.slice(0, start).map((text) => ({ op: "same" as const, text }));
  let i = 0;
  let j = 0;
  while (i < n && j < m) {
    if (midA[i] === midB[j]) {
      parts.push({ op: "same", text: midA[i] });
      i++;
      j++;
    } else if (table[(i + 1) * w + j] >= table[i * w + j + 1]) {
      parts.push({ op: "removed", text: midA[i++] });
    } else {
      parts.push({ op: "added", text: midB[j++] });
    }
  }
  while (i < n) parts.push({ op: "removed", text: midA[i++] });
  while (j < m) parts.push({ op: "added", text: midB[j++] });
  for (const text of a.slice(endA)) parts.push({ op: "same", text });
  return parts;
}

/** Join neighbours of the same kind; a whitespace token between two changes of one kind joins them. */
function merge(parts: DiffPart[]): DiffPart[] {
  const out: DiffPart[] = [];
  for (const part of parts) {
    if (part.text === "") continue;
    const last = out[out.length - 1];
    if (last && last.op === part.op) last.text += part.text;
    else out.push({ ...part });
  }
  return out;
}

/** The parts one side shows: the left pane shows same + removed, the right same + added. */
export function side(parts: DiffPart[], which: "left" | "right"): DiffPart[] {
  const hidden: DiffOp = which === "left" ? "added" : "removed";
  return parts.filter((p) => p.op !== hidden);
}

export function changedWordCount(parts: DiffPart[]): number {
  return parts.filter((p) => p.op !== "same").reduce((n, p) => n + (p.text.match(/[\p{L}\p{N}_]+/gu)?.length ?? 0), 0);
}
