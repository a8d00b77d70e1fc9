import { describe, expect, it } from "vitest";
import { filterRows, parseSort, sortParam, sortRows, visibleWindow, type Row } from "./sampleTable";

const row = (id: number, prompt: number, score: number | null, adv: number | null, length: number, first_line = ""): Row =>
  ({ id, sample_index: id, prompt_index: prompt, score, advantage: adv, length, first_line });
const rows = [row(1, 2, 0, -0.5, 9, "12 + 3 = 15"), row(2, 0, 1, 1.5, 4, "7"), row(3, 1, null, null, 6, "no score"), row(4, 0, 1, 0.2, 2, "x")];

describe("dense samples table", () => {
  it("sorts by a column, missing values last, ties in prompt order", () => {
    expect(sortRows(rows, { column: "score", desc: true }).map((r) => r.id)).toEqual([2, 4, 1, 3]);
    expect(sortRows(rows, { column: "score", desc: false }).map((r) => r.id)).toEqual([1, 2, 4, 3]);
    expect(sortRows(rows, { column: "advantage", desc: true }).map((r) => r.id)).toEqual([2, 4, 1, 3]);
    expect(sortRows(rows, { column: "length", desc: false }).map((r) => r.id)).toEqual([4, 2, 3, 1]);
    expect(sortRows(rows, parseSort(null)).map((r) => r.id)).toEqual([2, 4, 3, 1]);
  });
  it("round-trips the sort through the URL", () => {
    expect(parseSort("-advantage")).toEqual({ column: "advantage", desc: true });
    expect(parseSort("bogus")).toEqual({ column: "prompt", desc: false });
    expect(sortParam({ column: "prompt", desc: false })).toBeNull();
    expect(sortParam({ column: "length", desc: true })).toBe("-length");
  });
  it("filters by prompt id or text", () => {
    expect(filterRows(rows, "#0").map((r) => r.id)).toEqual([2, 4]);
    expect(filterRows(rows, "1").map((r) => r.id)).toEqual([3]);
    expect(filterRows(rows, "= 15").map((r) => r.id)).toEqual([1]);
    expect(filterRows(rows, " ").length).toBe(4);
    // text in the question finds its answers too
    const asked = [{ ...rows[0], question: "What is 12 + 3?" }, { ...rows[1], question: "Name a prime" }];
    expect(filterRows(asked, "prime").map((r) => r.id)).toEqual([2]);
  });
  it("renders only the rows in view", () => {
    expect(visibleWindow(0, 300, 30, 4096)).toEqual([0, 20]);
    expect(visibleWindow(30 * 1000, 300, 30, 4096)).toEqual([990, 1020]);
    expect(visibleWindow(30 * 5000, 300, 30, 4096)).toEqual([4086, 4096]); // past the end (the list shrank)
  });
});

describe("turns column", () => {
  it("sorts multi-turn rows by their turn count, rows without turns last", () => {
    const rows: Row[] = [
      { id: 1, sample_index: 0, length: 1, first_line: "", num_turns: 4 },
      { id: 2, sample_index: 1, length: 1, first_line: "", num_turns: 2 },
      { id: 3, sample_index: 2, length: 1, first_line: "", num_turns: null },
      { id: 4, sample_index: 3, length: 1, first_line: "", num_turns: 6 },
    ];
    expect(sortRows(rows, { column: "turns", desc: true }).map((r) => r.id)).toEqual([4, 1, 2, 3]);
    expect(sortRows(rows, { column: "turns", desc: false }).map((r) => r.id)).toEqual([2, 1, 4, 3]);
    expect(parseSort("-turns")).toEqual({ column: "turns", desc: true });
  });
});
