/** The dense samples table's pure parts: sort, quick filter, and the window of rows a scroll position shows. */
import type { SampleRow } from "../client/types.gen";

/** The fields of the API's light sample row (`SampleRow`) that sorting and filtering read. */
export type Row = Pick<SampleRow, "id" | "sample_index" | "prompt_index" | "score" | "advantage" | "length" | "first_line"
  | "rollout_diff_max" | "num_turns"> & Partial<Pick<SampleRow, "question">>;

export type SortColumn = "prompt" | "score" | "advantage" | "length" | "mismatch" | "turns";
export interface Sort { column: SortColumn; desc: boolean }

/** `"-score"` -> score descending; anything unknown -> prompt order. */
export function parseSort(v: string | null): Sort {
  const desc = !!v && v.startsWith("-");
  const column = (v ?? "").replace(/^-/, "") as SortColumn;
  return ["prompt", "score", "advantage", "length", "mismatch", "turns"].includes(column) ? { column, desc } : { column: "prompt", desc: false };
}

export function sortParam(s: Sort): string | null {
  return s.column === "prompt" && !s.desc ? null : `${s.desc ? "-" : ""}${s.column}`;
}

function value(r: Row, c: SortColumn): number | null {
  const v = c === "prompt" ? r.prompt_index : c === "score" ? r.score : c === "advantage" ? r.advantage
    : c === "mismatch" ? r.rollout_diff_max : c === "turns" ? r.num_turns : r.length;
  return v === null || v === undefined || Number.isNaN(v) ? null : v;
}

/** Missing values sort last either way; ties keep prompt, then answer order. */
export function sortRows<T extends Row>(rows: readonly T[], s: Sort): T[] {
  const dir = s.desc ? -1 : 1;
  return [...rows].sort((a, b) => {
    const va = value(a, s.column);
    const vb = value(b, s.column);
    if (va !== vb) {
      if (va === null) return 1;
      if (vb === null) return -1;
      return (va - vb) * dir;
    }
    return ((a.prompt_index ?? -1) - (b.prompt_index ?? -1)) || a.sample_index - b.sample_index || a.id - b.id;
  });
}

/** Quick filter: `#12` (or a bare number) matches prompt 12; other text matches the answer's first line or the
 * question. */
export function filterRows<T extends Row>(rows: readonly T[], text: string): T[] {
  const t = text.trim();
  if (!t) return [...rows];
  const m = /^#?(\d+)$/.exec(t);
  if (m) return rows.filter((r) => r.prompt_index === Number(m[1]));
  const needle = t.toLowerCase();
  return rows.filter((r) => r.first_line.toLowerCase().includes(needle) || (r.question ?? "").toLowerCase().includes(needle));
}

/** Rows [start, end) to render for a viewport: fixed row height, a few extra rows above and below. */
export function visibleWindow(scrollTop: number, viewport: number, rowHeight: number, total: number, overscan = 10): [number, number] {
  const first = Math.min(total, Math.floor(Math.max(0, scrollTop) / rowHeight));
  const count = Math.ceil(viewport / rowHeight);
  return [Math.max(0, first - overscan), Math.min(total, first + count + overscan)];
}
