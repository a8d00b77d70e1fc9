import { describe, expect, it } from "vitest";
import { changedWordCount, side, tokenize, wordDiff } from "./wordDiff";

const join = (parts: { text: string }[]) => parts.map((p) => p.text).join("");

describe("wordDiff", () => {
  it("tokenizes losslessly", () => {
    const t = "The answer is 42.\n#### 42";
    expect(tokenize(t).join("")).toBe(t);
    expect(tokenize("a, b")).toEqual(["a", ",", " ", "b"]);
  });

  it("marks changed words and reconstructs both sides", () => {
    const a = "so the answer is 12 #### 12";
    const b = "so the result is 13 #### 13";
    const parts = wordDiff(a, b);
    expect(join(side(parts, "left"))).toBe(a);
    expect(join(side(parts, "right"))).toBe(b);
    expect(parts.filter((p) => p.op === "removed").map((p) => p.text)).toEqual(["answer", "12", "12"]);
    expect(parts.filter((p) => p.op === "added").map((p) => p.text)).toEqual(["result", "13", "13"]);
    expect(changedWordCount(parts)).toBe(6);
  });

  it("handles identical, empty and disjoint texts", () => {
    expect(wordDiff("same text", "same text")).toEqual([{ op: "same", text: "same text" }]);
    expect(wordDiff("", "new")).toEqual([{ op: "added", text: "new" }]);
    expect(wordDiff("old", "")).toEqual([{ op: "removed", text: "old" }]);
    const parts = wordDiff("alpha", "beta");
    expect(parts).toEqual([{ op: "removed", text: "alpha" }, { op: "added", text: "beta" }]);
  });

  it("insertions in the middle keep the rest aligned", () => {
    const parts = wordDiff("one two three", "one two and a half three");
    expect(parts).toEqual([
      { op: "same", text: "one two " },
      { op: "added", text: "and a half " },
      { op: "same", text: "three" },
    ]);
  });

  it("stays fast on long texts", () => {
    const a = Array.from({ length: 3000 }, (_, i) => `w${i}`).join(" ");
    const b = a.replace("w1500", "changed");
    const t0 = Date.now();
    const parts = wordDiff(a, b);
    expect(Date.now() - t0).toBeLessThan(1000);
    expect(join(side(parts, "right"))).toBe(b);
  });
});
