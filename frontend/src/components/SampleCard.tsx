import { useState } from "react";
import type { SamplePublic } from "../client/types.gen";
import { degenerateReason } from "../lib/degenerate";
import { isTrajectory, summarize } from "../lib/conversation";
import { fmtNum } from "../lib/format";
import { stalenessLabel, versionLabel } from "../lib/staleness";
import { MISMATCH_THRESHOLD, mismatchSummary } from "../lib/tokenMismatch";
import { ScoreBadge } from "./Badges";
import { Conversation } from "./Conversation";
import { Question } from "./Question";
import { ModelText } from "./Text";
import { TokenView, type Shade } from "./TokenView";

export function meanAdvantage(s: SamplePublic): number | null {
  // multi-turn: over the model's tokens only (tool answers carry no advantage)
  const a = (s.advantages ?? []).filter((v, i): v is number => v !== null && Number.isFinite(v) && (!s.loss_mask || s.loss_mask[i] === 1));
  return a.length ? a.reduce((x, y) => x + y, 0) / a.length : null;
}

export function SampleCard({ sample, shade, showPrompt = true, compact = false }: {
  sample: SamplePublic; shade: Shade; showPrompt?: boolean; compact?: boolean;
}) {
  const [tokens, setTokens] = useState(false);
  const degenerate = degenerateReason(sample);
  const adv = meanAdvantage(sample);
  const mismatch = mismatchSummary(sample);
  const multi = isTrajectory(sample) ? summarize(sample.turns!) : null;
  const version = versionLabel(sample);
  const staleness = stalenessLabel(sample);
  return (
    <article className={`card sample-card ${compact ? "compact" : ""}`} data-sample-id={sample.id}>
      <header className="sample-head">
        <ScoreBadge score={sample.score} />
        {adv !== null && <span className="badge neutral" title="mean advantage over the response's tokens">adv {fmtNum(adv, 3)}</span>}
        {degenerate && <span className="badge alarm-warning" title="degenerate answer">{degenerate}</span>}
        {mismatch && (
          <span className={`badge ${mismatch.over ? "alarm-warning" : "neutral"}`} data-mismatch={mismatch.maxAbs}
            title={`rollout vs actor log-probs: largest |gap| over the ${mismatch.tokens} tokens; tokens with |gap| > ${MISMATCH_THRESHOLD}`}>
            max |Δ rollout| {fmtNum(mismatch.maxAbs, 3)} · {mismatch.over} token{mismatch.over === 1 ? "" : "s"} &gt; {MISMATCH_THRESHOLD}
          </span>
        )}
        {version && <span className={`badge ${(sample.staleness ?? 0) > 0 ? "alarm-warning" : "neutral"}`} data-version={version}
          data-staleness={sample.staleness ?? ""} title="the policy version(s) that wrote this answer, and how far its newest token lags the weights step trained (verl's trajectory staleness)">
          {version} · {staleness}</span>}
        {multi && <span className="badge neutral" data-turns={multi.turns}
          title="conversation turns: the prompt, each model turn, each tool answer">{multi.turns} turns · {multi.calls} tool call{multi.calls === 1 ? "" : "s"}{multi.tools.length ? ` (${multi.tools.join(", ")})` : ""}</span>}
        {multi && multi.errors > 0 && <span className="badge alarm-warning" data-tool-errors={multi.errors}>{multi.errors} tool error{multi.errors === 1 ? "" : "s"}</span>}
        <span className="muted small">prompt #{sample.prompt_index ?? "—"} · {sample.data_source ?? "?"} · step {sample.step}{sample.split === "val" ? " · val" : ""}</span>
        {(sample.tokens?.length ?? 0) > 0 && (
          <button type="button" className="link-button" aria-pressed={tokens} onClick={() => setTokens((t) => !t)}>
            {tokens ? "text" : "tokens"}
          </button>
        )}
      </header>
      {showPrompt && <Question prompt={sample.prompt} />}
      <div className="response">
        {tokens ? <TokenView sample={sample} shade={shade} /> : multi ? <Conversation sample={sample} /> : <ModelText text={sample.response} />}
      </div>
      {sample.ground_truth !== null && sample.ground_truth !== undefined && (
        <div className="ground-truth small"><span className="muted">ground truth:</span> <span className="mono">{sample.ground_truth}</span></div>
      )}
    </article>
  );
}
