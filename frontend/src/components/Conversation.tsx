/**
 * A multi-turn sample as a conversation: the model's turns (with the tool calls they made), and the tools'
 * answers (errors marked as such), each visibly distinct. Text stays text (ModelText: never HTML).
 */
import type { SamplePublic, Turn } from "../client/types.gen";
import { fmtNum } from "../lib/format";
import { callLabel } from "../lib/conversation";
import { ModelText } from "./Text";

function latency(s: number | null | undefined): string {
  if (s === null || s === undefined) return "";
  return s < 1 ? `${fmtNum(s * 1000, 3)} ms` : `${fmtNum(s, 3)} s`;
}

function TurnBlock({ turn, index }: { turn: Turn; index: number }) {
  if (turn.role === "tool") {
    return (
      <div className={`turn turn-tool ${turn.error ? "turn-error" : ""}`} data-role="tool" data-turn={index} data-error={turn.error ? "true" : "false"}>
        <div className="turn-head small">
          <span className="turn-role">{turn.error ? "✗ tool error" : "↳ tool result"}</span>
          <span className="mono">{turn.tool ?? "(no tool)"}</span>
          {turn.latency_s !== null && turn.latency_s !== undefined && <span className="muted">{latency(turn.latency_s)}</span>}
          {turn.reward ? <span className="muted">reward {fmtNum(turn.reward, 3)}</span> : null}
          <span className="muted" title="tool answers are context: the model attends to them, the loss does not train on them">context, not trained on</span>
        </div>
        {turn.error && turn.error_message && <div className="turn-error-message small" role="note">error: {turn.error_message}</div>}
        <ModelText text={turn.text} className="turn-text" template />
      </div>
    );
  }
  return (
    <div className="turn turn-model" data-role="model" data-turn={index}>
      <div className="turn-head small"><span className="turn-role">model</span></div>
      <ModelText text={turn.text} className="turn-text" template />
      {(turn.tool_calls ?? []).map((c, k) => (
        <div key={k} className="tool-call small" data-tool={c.name ?? ""}>
          <span className="muted">calls</span> <code className="mono">{callLabel(c)}</code>
        </div>
      ))}
    </div>
  );
}

export function Conversation({ sample }: { sample: Pick<SamplePublic, "turns"> }) {
  const turns = sample.turns ?? [];
  return (
    <div className="conversation" aria-label="conversation">
      {turns.map((t, i) => <TurnBlock key={i} turn={t} index={i} />)}
    </div>
  );
}
