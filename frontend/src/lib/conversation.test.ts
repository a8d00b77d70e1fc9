import { describe, expect, it } from "vitest";
import type { Turn } from "../client/types.gen";
import { callLabel, isTrajectory, lossSaw, summarize, tokenTurns, turnQuery } from "./conversation";

const TURNS: Turn[] = [
  { role: "model", start: 0, end: 3, text: "<c>", tool_calls: [{ name: "calculator", arguments: { expression: "12*34" } }] },
  { role: "tool", start: 3, end: 5, text: "=408\n", tool: "calculator", error: false },
  { role: "model", start: 5, end: 6, text: "408", tool_calls: [{ name: "calculator", arguments: { expression: "7/0" } }] },
  { role: "tool", start: 6, end: 8, text: "=error", tool: "calculator", error: true, error_message: "division by zero" },
];

describe("conversation", () => {
  it("labels calls with their arguments", () => {
    expect(callLabel({ name: "calculator", arguments: { expression: "12*34" } })).toBe('calculator(expression="12*34")');
    expect(callLabel({ name: null, arguments: "not json" })).toBe('(unreadable call)("not json")');
    expect(callLabel({ name: "python" })).toBe("python()");
  });
  it("reads the loss mask per token", () => {
    const s = { loss_mask: [1, 0, 1] };
    expect([0, 1, 2, 3].map((i) => lossSaw(s, i))).toEqual([true, false, true, null]);
    expect(lossSaw({ loss_mask: null }, 0)).toBeNull();
  });
  it("maps tokens to their turns", () => {
    expect(tokenTurns(TURNS, 9)).toEqual([0, 0, 0, 1, 1, 2, 3, 3, -1]);
  });
  it("summarizes turns, calls, errors and tools", () => {
    expect(summarize(TURNS)).toEqual({ turns: 5, calls: 2, errors: 1, tools: ["calculator"] });
    expect(isTrajectory({ turns: TURNS })).toBe(true);
    expect(isTrajectory({ turns: null })).toBe(false);
  });
  it("turns URL parameters into API filters, dropping bad values", () => {
    expect(turnQuery(new URLSearchParams("turns=4&tool=calculator&tool_error=1"))).toEqual({ num_turns: 4, tool: "calculator", tool_error: true });
    expect(turnQuery(new URLSearchParams("tool=*&tool_error=0"))).toEqual({ uses_tool: true, tool_error: false });
    expect(turnQuery(new URLSearchParams("tool=-"))).toEqual({ uses_tool: false });
    expect(turnQuery(new URLSearchParams("turns=0&tool=rm%20-rf&tool_error=maybe"))).toEqual({});
    expect(turnQuery(new URLSearchParams("turns=2.5"))).toEqual({});
  });
});
