/**
 * Multi-turn samples: the turns as a conversation (model turns with their tool calls, tool answers with their
 * errors), the loss mask per token, and the turn / tool / tool-error filters as URL parameters.
 */
import type { SamplePublic, ToolCall, Turn } from "../client/types.gen";

export function isTrajectory(s: Pick<SamplePublic, "turns">): boolean {
  return Array.isArray(s.turns) && s.turns.length > 0;
}

/** A call as one line: `calculator(expression="12*34")`; arguments that are not an object are shown as JSON. */
export function callLabel(call: ToolCall): string {
  const name = call.name ?? "(unreadable call)";
  const args = call.arguments;
  if (args && typeof args === "object" && !Array.isArray(args)) {
    return `${name}(${Object.entries(args as Record<string, unknown>).map(([k, v]) => `${k}=${JSON.stringify(v)}`).join(", ")})`;
  }
  return args === undefined || args === null ? `${name}()` : `${name}(${JSON.stringify(args)})`;
}

/** Whether the loss saw token i: true (the model's), false (context: a tool answer), null (no mask logged). */
export function lossSaw(s: Pick<SamplePublic, "loss_mask">, i: number): boolean | null {
  const m = s.loss_mask;
  return m && i < m.length ? m[i] === 1 : null;
}

/** The turn each token belongs to (index into turns), -1 where no turn covers it. */
export function tokenTurns(turns: Turn[], n: number): number[] {
  const out = new Array<number>(n).fill(-1);
  turns.forEach((t, k) => {
    if (t.start === null || t.start === undefined || t.end === null || t.end === undefined) return;
    for (let i = Math.max(0, t.start); i < Math.min(n, t.end); i++) out[i] = k;
  });
  return out;
}

export interface TurnSummary { turns: number; calls: number; errors: number; tools: string[] }

export function summarize(turns: Turn[]): TurnSummary {
  const tools: string[] = [];
  let calls = 0;
  let errors = 0;
  for (const t of turns) {
    for (const c of t.tool_calls ?? []) {
      calls += 1;
      if (c.name && !tools.includes(c.name)) tools.push(c.name);
    }
    if (t.role === "tool" && t.error) errors += 1;
  }
  return { turns: 1 + turns.length, calls, errors, tools };
}

/** The API's turn filters from the page's URL: `turns` (a count), `tool` (a name, `*` any, `-` none),
 * `tool_error` (`1` with, `0` without). Values that cannot be right are left out rather than sent. */
export interface TurnQuery { num_turns?: number; tool?: string; uses_tool?: boolean; tool_error?: boolean }

export function turnQuery(params: URLSearchParams): TurnQuery {
  const out: TurnQuery = {};
  const turns = Number(params.get("turns"));
  if (params.get("turns") && Number.isInteger(turns) && turns >= 1) out.num_turns = turns;
  const tool = params.get("tool") ?? "";
  if (tool === "*") out.uses_tool = true;
  else if (tool === "-") out.uses_tool = false;
  else if (/^[A-Za-z0-9_.:-]+$/.test(tool)) out.tool = tool;
  const err = params.get("tool_error");
  if (err === "1") out.tool_error = true;
  else if (err === "0") out.tool_error = false;
  return out;
}
