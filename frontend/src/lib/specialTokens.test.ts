import { describe, expect, it } from "vitest";
import { specialTokenLabel } from "./specialTokens";

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
