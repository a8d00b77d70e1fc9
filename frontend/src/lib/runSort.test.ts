import { describe, expect, it } from "vitest";
import { nextRunSort, parseRunSort, runSortParam, sortRuns } from "./runSort";

const runs = [
  { id: 1, score: 0.316, val: 0.565 },
  { id: 2, score: 0.5, val: 0.41 },
  { id: 3, score: null, val: null },
  { id: 4, score: 0.2, val: 0.565 },
];
const value = (r: (typeof runs)[number], c: "score" | "val") => (c === "score" ? r.score : r.val);

describe("runs table sort", () => {
  it("sorts by held-out or training score, runs without one last, ties in the server's order", () => {
    expect(sortRuns(runs, { column: "val", desc: true }, value).map((r) => r.id)).toEqual([1, 4, 2, 3]);
    expect(sortRuns(runs, { column: "val", desc: false }, value).map((r) => r.id)).toEqual([2, 1, 4, 3]);
    expect(sortRuns(runs, { column: "score", desc: true }, value).map((r) => r.id)).toEqual([2, 1, 4, 3]);
    expect(sortRuns(runs, null, value).map((r) => r.id)).toEqual([1, 2, 3, 4]);
  });
  it("keeps the choice in the URL; a click sorts highest first, then flips", () => {
    expect(parseRunSort("-val")).toEqual({ column: "val", desc: true });
    expect(parseRunSort("score")).toEqual({ column: "score", desc: false });
    expect(parseRunSort("name")).toBeNull();
    expect(parseRunSort(null)).toBeNull();
    expect(runSortParam({ column: "val", desc: true })).toBe("-val");
    expect(runSortParam(null)).toBeNull();
    expect(nextRunSort(null, "val")).toEqual({ column: "val", desc: true });
    expect(nextRunSort({ column: "val", desc: true }, "val")).toEqual({ column: "val", desc: false });
    expect(nextRunSort({ column: "val", desc: false }, "score")).toEqual({ column: "score", desc: true });
  });
});
