import { describe, expect, it } from "vitest";
import { degenerateReason } from "./degenerate";

describe("degenerateReason (a sample card's mark)", () => {
  it("marks empty and repetitive answers, not ordinary ones", () => {
    expect(degenerateReason({ response: "  " })).toBe("empty answer");
    expect(degenerateReason({ response: null })).toBe("empty answer");
    expect(degenerateReason({ response: "the the the the the the the the the" })).toMatch(/repeated 8\+ times/);
    expect(degenerateReason({ response: "the the the the the the the" })).toBeNull(); // 7 in a row: not yet
    expect(degenerateReason({ response: "I think so. I think so. I think so. I think so. I think so." })).toMatch(/phrase/);
    expect(degenerateReason({ response: "12 + 30 = 42, so the answer is #### 42" })).toBeNull();
  });
  it("reads the model's tokens when it has them", () => {
    expect(degenerateReason({ response: "x", tokens: ["a", "a", "a", "a", "a", "a", "a", "a"] })).toMatch(/"a" repeated/);
    expect(degenerateReason({ response: "a a a a a a a a", tokens: ["a a a a", " a a a a"] })).toBeNull();
  });
});
