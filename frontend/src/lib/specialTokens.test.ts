import { describe, expect, it } from "vitest";
import { specialTokenLabel, splitSpecial } from "./specialTokens";

describe("specialTokenLabel", () => {
  it("names chat-template tokens instead of showing them raw", () => {
    expect(specialTokenLabel("<|im_end|>")).toBe("end of turn");
    expect(specialTokenLabel("<|eot_id|>")).toBe("end of turn");
    expect(specialTokenLabel("<|endoftext|>")).toBe("end of text");
    expect(specialTokenLabel("</s>")).toBe("end of text");
    expect(specialTokenLabel("<|fim_pad|>")).toBe("fim pad");
  });
  it("leaves ordinary text alone, markup-looking text included", () => {
    for (const t of [" the", "<", "|", "<b>", "<|", "a <|im_end|>", "<id:49160>", "\n"]) expect(specialTokenLabel(t)).toBeNull();
  });
});

describe("splitSpecial", () => {
  it("keeps the text and marks the template tokens", () => {
    expect(splitSpecial("12 * 34 = 408<|im_end|>\n<|im_start|>user\nok")).toEqual([
      { text: "12 * 34 = 408", special: null }, { text: "<|im_end|>", special: "end of turn" },
      { text: "\n", special: null }, { text: "<|im_start|>", special: "turn start" }, { text: "user\nok", special: null },
    ]);
    expect(splitSpecial("plain")).toEqual([{ text: "plain", special: null }]);
  });
});
