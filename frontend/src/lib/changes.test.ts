import { describe, expect, it } from "vitest";
import { compare, resultsAt, sortChanges, strips, type ValRow } from "./changes";

// prompts 0..4 at validations 0, 10, 20
const table: Record<number, number[]> = { 0: [0, 1, 1], 1: [1, 0, 1], 2: [1, 1, 1], 3: [0, 0, 0], 4: [0, 0.5, 1] };
const rows: ValRow[] = Object.entries(table).flatMap(([p, scores]) =>
  scores.map((score, i) => ({ step: i * 10, prompt_index: Number(p), score, first_line: `p${p}@${i * 10}` })));

describe("what changed", () => {
  it("counts newly solved, newly failed, both and neither between two validations", () => {
    const { counts, changes, onlyOne } = compare(resultsAt(rows, 0, 1), resultsAt(rows, 10, 1));
    expect(counts).toEqual({ "newly-solved": 1, "newly-failed": 1, both: 1, neither: 2 });
    expect(changes.find((c) => c.prompt === 0)!.kind).toBe("newly-solved");
    expect(changes.find((c) => c.prompt === 1)!.kind).toBe("newly-failed");
    expect(onlyOne).toBe(0);
  });
  it("the threshold decides what solved means; several answers are averaged", () => {
    const half = compare(resultsAt(rows, 0, 0.5), resultsAt(rows, 10, 0.5)).counts;
    expect(half["newly-solved"]).toBe(2); // prompt 4's 0.5 counts at threshold 0.5
    const two: ValRow[] = [{ step: 0, prompt_index: 9, score: 1 }, { step: 0, prompt_index: 9, score: 0 }];
    expect(resultsAt(two, 0, 0.5).get(9)).toMatchObject({ score: 0.5, solved: true });
    // each prompt carries its question (from the sample rows) next to its first answer
    const asked: ValRow[] = [{ step: 0, prompt_index: 3, score: 1, first_line: "7", question: "What is 3 + 4?" }];
    expect(resultsAt(asked, 0, 0.5).get(3)).toMatchObject({ answer: "7", question: "What is 3 + 4?" });
  });
  it("sorts by most improved and most regressed", () => {
    const { changes } = compare(resultsAt(rows, 0, 1), resultsAt(rows, 10, 1));
    expect(sortChanges(changes, "improved").map((c) => c.prompt)).toEqual([0, 4, 2, 3, 1]);
    expect(sortChanges(changes, "regressed")[0].prompt).toBe(1);
  });
  it("strips show each prompt over the validations, flip-floppers first", () => {
    const s = strips(rows, [0, 10, 20], 1);
    expect(s[0]).toEqual({ prompt: 1, marks: [true, false, true], flips: 2 });
    expect(s.find((x) => x.prompt === 3)).toEqual({ prompt: 3, marks: [false, false, false], flips: 0 });
    expect(strips([{ step: 10, prompt_index: 7, score: 1 }], [0, 10], 1)[0].marks).toEqual([null, true]);
  });
});

describe("multi-turn validations", () => {
  it("count the answers that called a tool and the failed calls per prompt", () => {
    const rows = [
      { step: 5, prompt_index: 1, score: 1, first_line: "a", num_turns: 4, tools: ["calculator"], tool_error: false },
      { step: 5, prompt_index: 1, score: 0, first_line: "b", num_turns: 4, tools: ["calculator"], tool_error: true },
      { step: 5, prompt_index: 2, score: 1, first_line: "c", num_turns: 2, tools: null, tool_error: false },
      { step: 5, prompt_index: 3, score: 1, first_line: "d" },
    ];
    const at = resultsAt(rows, 5, 0.5);
    expect(at.get(1)!.tool).toEqual({ answers: 2, used: 2, errors: 1 });
    expect(at.get(2)!.tool).toEqual({ answers: 1, used: 0, errors: 0 });
    expect(at.get(3)!.tool).toBeUndefined();
  });
});
