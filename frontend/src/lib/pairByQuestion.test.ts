import { describe, expect, it } from "vitest";
import { pairByQuestion, type Pairable } from "./pairByQuestion";

const chatml = (q: string) => `<|im_start|>user\n${q}<|im_end|>\n<|im_start|>assistant\n`;
// what verl's dump holds: the prompt decoded with skip_special_tokens=True
const verl = (q: string) => `system\nYou are a helpful assistant.\nuser\n${q}\nassistant\n`;

describe("pairByQuestion", () => {
  it("leaves indexed panes as they are", () => {
    const a = [{ prompt: chatml("What is 2 + 2?"), prompt_index: 7 }];
    const [x, y] = pairByQuestion(a, a);
    expect(x).toBe(a);
    expect(y).toBe(a);
  });

  it("gives a verl dump's answers the rlstudio run's data set rows, by the question inside the prompt", () => {
    const ours: Pairable[] = [{ prompt: chatml("What is 1 + 1?"), prompt_index: 40 }, { prompt: chatml("What is 11 + 1?"), prompt_index: 41 }];
    const theirs: Pairable[] = [{ prompt: verl("What is 11 + 1?") }, { prompt: verl("What is 1 + 1?") }, { prompt: verl("What is 5 + 5?") }];
    const [a, b] = pairByQuestion(ours, theirs);
    expect(a.map((s) => s.prompt_index)).toEqual([40, 41]);
    expect(b.map((s) => s.prompt_index)).toEqual([41, 40, null]); // the longest question wins; no partner: none
  });

  it("matches the same templated question text exactly, on either side", () => {
    const [a, b] = pairByQuestion<Pairable>([{ prompt: chatml("Q one") }], [{ prompt: chatml("Q  one"), prompt_index: 3 }]);
    expect(a[0].prompt_index).toBe(3);
    expect(b[0].prompt_index).toBe(3);
  });

  it("numbers two imports' questions in the left pane's order", () => {
    const [a, b] = pairByQuestion<Pairable>([{ prompt: verl("A?") }, { prompt: verl("B?") }], [{ prompt: verl("B?") }]);
    expect(a.map((s) => s.prompt_index)).toEqual([0, 1]);
    expect(b.map((s) => s.prompt_index)).toEqual([1]);
  });
});
