import { describe, expect, it } from "vitest";
import { questionOf } from "./question";

describe("questionOf", () => {
  it("takes the last user turn of Qwen's chat template", () => {
    const p = "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nWhat is 2+2?\nShow your work.<|im_end|>\n<|im_start|>assistant\n";
    expect(questionOf(p)).toEqual({ text: "What is 2+2?\nShow your work.", templated: true });
    // few-shot: earlier user turns are examples; the question is the last one
    const shots = "<|im_start|>user\n1+1?<|im_end|>\n<|im_start|>assistant\n2<|im_end|>\n<|im_start|>user\n3+4?<|im_end|>\n<|im_start|>assistant\n";
    expect(questionOf(shots).text).toBe("3+4?");
  });
  it("reads the tiny model's compact form and Llama 3's template", () => {
    expect(questionOf("<|im_start|>Q:82+53=?<|im_end|><|im_start|>A:")).toEqual({ text: "82+53=?", templated: true });
    const llama = "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nName a prime.<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n";
    expect(questionOf(llama).text).toBe("Name a prime.");
  });
  it("a user turn cut short runs to the end", () => {
    expect(questionOf("<|im_start|>user\nunfinished ").text).toBe("unfinished");
  });
  it("plain text is the question; a template without a user turn loses only its tokens and roles", () => {
    expect(questionOf("  What is 7 * 6?\n")).toEqual({ text: "What is 7 * 6?", templated: false });
    expect(questionOf("a <b>tag</b> is not a template")).toEqual({ text: "a <b>tag</b> is not a template", templated: false });
    expect(questionOf("<|im_start|>system\nOnly a system turn.<|im_end|>\n<|im_start|>assistant\n")).toEqual({ text: "Only a system turn.", templated: true });
    expect(questionOf(null)).toEqual({ text: "", templated: false });
    expect(questionOf("")).toEqual({ text: "", templated: false });
  });
});
