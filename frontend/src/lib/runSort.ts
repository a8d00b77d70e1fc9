/** The runs table's sortable score columns: the training score (from the metric series) and the latest
 * held-out score (the list's `val_score`). The URL keeps the choice: `sort=-val` is held-out, highest first. */

export type RunSortColumn = "score" | "val";
export interface RunSort { column: RunSortColumn; desc: boolean }

export function parseRunSort(v: string | null): RunSort | null {
  const column = (v ?? "").replace(/^-/, "");
  return column === "score" || column === "val" ? { column, desc: v!.startsWith("-") } : null;
}

export function runSortParam(s: RunSort | null): string | null {
  return s ? `${s.desc ? "-" : ""}${s.column}` : null;
}

/** A header click: a new column sorts highest first; the same column flips. */
export function nextRunSort(current: RunSort | null, column: RunSortColumn): RunSort {
  return current?.column === column ? { column, desc: !current.desc } : { column, desc: true };
}

/** Runs without a value (none logged yet) go last either way; ties keep the server's order (newest first). */
export function sortRuns<T>(rows: readonly T[], sort: RunSort | null, value: (row: T, column: RunSortColumn) => number | null | undefined): T[] {
  if (!sort) return [...rows];
  const dir = sort.desc ? -1 : 1;
  return rows.map((row, i) => ({ row, i, v: value(row, sort.column) }))
    .sort((a, b) => {
      const va = a.v === null || a.v === undefined || Number.isNaN(a.v) ? null : a.v;
      const vb = b.v === null || b.v === undefined || Number.isNaN(b.v) ? null : b.v;
      if (va !== vb) {
        if (va === null) return 1;
        if (vb === null) return -1;
        return (va - vb) * dir;
      }
      return a.i - b.i;
    })
    .map((x) => x.row);
}
