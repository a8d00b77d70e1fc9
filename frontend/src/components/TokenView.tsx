/**
 * A response's tokens shaded by log-prob, KL to the reference (old − ref log-prob, per token), advantage, the
 * rollout − actor log-prob gap, the importance weight (runs with a separate rollout, e.g. vLLM) or the policy
 * version that wrote each token (asynchronous runs: shaded by how many versions it lags the trained weights), with a
 * legend and each token's values on hover (title) and focus. Multi-turn samples: tokens the loss did not see
 * (tool answers: context) are marked apart from the model's (loss_mask), and each turn starts a little apart.
 */
import type { SamplePublic } from "../client/types.gen";
import { lossSaw, tokenTurns } from "../lib/conversation";
import { fmtNum } from "../lib/format";
import { tokenVersions, versionAge } from "../lib/staleness";
import { specialTokenLabel } from "../lib/specialTokens";
import { importanceWeights, logProbGap, rolloutLogProbs } from "../lib/tokenMismatch";

export type Shade = "logprob" | "kl" | "advantage" | "rollout-gap" | "is-weight" | "version";

export const SHADES: { id: Shade; label: string }[] = [
  { id: "logprob", label: "log-prob" },
  { id: "kl", label: "KL to reference" },
  { id: "advantage", label: "advantage" },
  { id: "rollout-gap", label: "rollout − actor log-prob" },
  { id: "is-weight", label: "importance weight" },
  { id: "version", label: "policy version" },
];

function tokenValues(sample: SamplePublic, shade: Shade): (number | null)[] {
  const n = sample.tokens?.length ?? 0;
  const at = (arr: (number | null)[] | null | undefined, i: number) => (arr && i < arr.length ? arr[i] : null);
  const versions = shade === "version" ? tokenVersions(sample, n) : null;
  return Array.from({ length: n }, (_, i) => {
    if (shade === "version") return versionAge(sample.step, at(versions, i));
    if (shade === "logprob") return at(sample.old_log_probs, i);
    if (shade === "advantage") return at(sample.advantages, i);
    if (shade === "rollout-gap") return at(logProbGap(sample), i);
    if (shade === "is-weight") return at(importanceWeights(sample), i);
    const a = at(sample.old_log_probs, i);
    const b = at(sample.ref_log_probs, i);
    return a === null || b === null ? null : a - b;
  });
}

/** Color for a value: log-prob from red (unlikely) to clear (certain); KL and advantage diverging around 0. */
function color(shade: Shade, v: number | null, scale: number): string {
  if (v === null || !Number.isFinite(v)) return "transparent";
  if (shade === "is-weight") { // 1 is agreement: shade by how far the log of the weight is from 0
    const t = Math.min(1, Math.abs(Math.log(Math.max(v, 1e-12))) / Math.max(scale, 1e-6));
    return v >= 1 ? `rgba(84, 162, 75, ${(t * 0.75).toFixed(3)})` : `rgba(228, 87, 86, ${(t * 0.75).toFixed(3)})`;
  }
  if (shade === "version") { // versions behind the trained weights: 0 (current) clear, the oldest full violet
    const t = Math.min(1, Math.max(0, v / Math.max(scale, 1e-6)));
    return `rgba(137, 87, 229, ${(t * 0.75).toFixed(3)})`;
  }
  if (shade === "logprob") {
    const t = Math.min(1, Math.max(0, -v / Math.max(scale, 1e-6)));
    return `rgba(228, 87, 86, ${(t * 0.75).toFixed(3)})`;
  }
  const t = Math.min(1, Math.abs(v) / Math.max(scale, 1e-6));
  return v >= 0 ? `rgba(84, 162, 75, ${(t * 0.75).toFixed(3)})` : `rgba(228, 87, 86, ${(t * 0.75).toFixed(3)})`;
}

export function TokenView({ sample, shade }: { sample: SamplePublic; shade: Shade }) {
  const tokens = sample.tokens ?? [];
  if (!tokens.length) return <div className="muted">No per-token data for this sample.</div>;
  const values = tokenValues(sample, shade);
  const finite = values.filter((v): v is number => v !== null && Number.isFinite(v));
  const scale = shade === "logprob" ? Math.max(1e-6, -Math.min(0, ...finite))
    : shade === "is-weight" ? Math.max(1e-6, ...finite.map((v) => Math.abs(Math.log(Math.max(v, 1e-12)))))
      : Math.max(1e-6, ...finite.map(Math.abs));
  const versions = tokenVersions(sample, tokens.length);
  const legend = shade === "version" ? [`v${sample.step - 1} (the trained weights)`,
    finite.some((v) => v > 0) ? `${scale} version${scale === 1 ? "" : "s"} older` : "(every token current)"]
    : shade === "logprob" ? [`0 (certain)`, `${fmtNum(-scale)} (unlikely)`]
    : shade === "is-weight" ? [`${fmtNum(Math.exp(-scale))}`, `${fmtNum(Math.exp(scale))}`]
      : [`−${fmtNum(scale)}`, `+${fmtNum(scale)}`];
  const rollout = rolloutLogProbs(sample);
  const gap = logProbGap(sample);
  const weights = importanceWeights(sample);
  const kl = tokenValues(sample, "kl");
  const masked = Array.isArray(sample.loss_mask);
  const turnOf = sample.turns ? tokenTurns(sample.turns, tokens.length) : null;
  return (
    <div className="token-view">
      <div className="token-legend" aria-label="legend">
        <span>{legend[0]}</span>
        <span className={`legend-bar legend-${shade === "logprob" || shade === "version" ? shade : "kl"}`} aria-hidden />
        <span>{legend[1]}</span>
        {!finite.length && <span className="muted"> (no values for this shading)</span>}
        {masked && (
          <span className="loss-legend">
            <span className="token" data-loss="1">abc</span> the model's tokens (in the loss)
            <span className="token context" data-loss="0">abc</span> context: tool answers (not in the loss)
          </span>
        )}
      </div>
      <div className="tokens model-text">
        {tokens.map((tok, i) => {
          const tip = [
            `token ${i}: ${JSON.stringify(tok)}`,
            `log-prob ${fmtNum(sample.old_log_probs?.[i] ?? null)}`,
            `ref log-prob ${fmtNum(sample.ref_log_probs?.[i] ?? null)}`,
            `KL ${fmtNum(kl[i])}`,
            `advantage ${fmtNum(sample.advantages?.[i] ?? null)}`,
            rollout ? `rollout log-prob ${fmtNum(rollout[i] ?? null)} (rollout − actor ${fmtNum(gap?.[i] ?? null)}, weight ${fmtNum(weights?.[i] ?? null)})` : "",
            sample.values ? `value ${fmtNum(sample.values[i] ?? null)}` : "",
            versions?.[i] != null ? `policy version v${versions[i]} (${sample.step - 1 - versions[i]!} behind the trained weights)` : "",
            masked ? (lossSaw(sample, i) ? "in the loss (the model's token)" : "context: not in the loss (a tool answer)") : "",
          ].filter(Boolean).join("\n");
          const saw = masked ? lossSaw(sample, i) : null;
          const special = specialTokenLabel(tok);
          const starts = turnOf !== null && i > 0 && turnOf[i] !== turnOf[i - 1];
          return <span key={i} className={`token${saw === false ? " context" : ""}${starts ? " turn-start" : ""}`} tabIndex={0} title={tip}
            data-value={values[i] ?? ""} data-version={versions?.[i] ?? undefined} data-loss={saw === null ? undefined : saw ? "1" : "0"}
            data-special={special ? tok : undefined}
            style={{ background: saw === false ? "transparent" : color(shade, values[i], scale) }}>{special ? <span className="special-token">{special}</span> : tok}</span>;
        })}
      </div>
    </div>
  );
}
