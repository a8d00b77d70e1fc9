/**
 * GRPO groups: the n answers to one prompt side by side, with the numbers the algorithm used: the group's
 * mean score, its std with n − 1 (what GRPO divides by), and each answer's advantage worked out next to the
 * advantage the run logged.
 */
import type { SamplePublic } from "../../client/types.gen";
import { meanAdvantage, SampleCard } from "../../components/SampleCard";
import type { Shade } from "../../components/TokenView";
import { ModelText } from "../../components/Text";
import { fmtNum } from "../../lib/format";
import { grpoAdvantage, grpoGroupStats, type GroupStats } from "../../lib/grpo";

export interface Group {
  id: string;
  prompt: string;
  promptIndex: number | null;
  samples: SamplePublic[];
  stats: GroupStats | null;
  degenerate: boolean; // every answer scored the same: zero advantage for all of them
}

/** How the run turned scores into advantages (from its resolved config). */
export interface AdvantageRule {
  estimator: string;
  normByStd: boolean;
}

export function advantageRule(config: Record<string, unknown> | undefined): AdvantageRule {
  const alg = (config?.algorithm ?? {}) as { adv_estimator?: string; norm_adv_by_std_in_grpo?: boolean };
  return { estimator: alg.adv_estimator ?? "grpo", normByStd: alg.norm_adv_by_std_in_grpo ?? true };
}

export function groupSamples(samples: SamplePublic[]): Group[] {
  const map = new Map<string, SamplePublic[]>();
  for (const s of samples) {
    const id = s.group_uid ?? `prompt-${s.prompt_index ?? s.id}`;
    if (!map.has(id)) map.set(id, []);
    map.get(id)!.push(s);
  }
  return [...map.entries()].map(([id, list]) => {
    const scores = list.map((s) => s.score).filter((v): v is number => v !== null && v !== undefined);
    const stats = scores.length === list.length ? grpoGroupStats(scores) : null;
    return { id, prompt: list[0].prompt ?? "", promptIndex: list[0].prompt_index ?? null, samples: list, stats,
      degenerate: list.length > 1 && stats !== null && stats.degenerate };
  });
}

function GroupNumbers({ group, rule }: { group: Group; rule: AdvantageRule }) {
  const { stats } = group;
  if (!stats) return <p className="small muted">Some answers have no score: no group statistics.</p>;
  const grpo = rule.estimator === "grpo";
  return (
    <table className="group-numbers small" data-group-numbers>
      <thead>
        <tr>
          <th>answer</th><th className="num">score</th><th className="num">score − mean</th>
          {grpo && <th className="num">{rule.normByStd ? "÷ (std + 1e-6) = advantage" : "advantage (no std division)"}</th>}
          <th className="num" title="mean of the advantage over the answer's tokens, as logged by the run">advantage used</th>
        </tr>
      </thead>
      <tbody>
        {group.samples.map((s, i) => {
          const logged = meanAdvantage(s);
          const expected = s.score !== null && s.score !== undefined ? grpoAdvantage(s.score, stats, rule.normByStd) : null;
          return (
            <tr key={s.id} data-answer={i + 1}>
              <td>{i + 1}</td>
              <td className="num" data-score>{fmtNum(s.score ?? null, 3)}</td>
              <td className="num">{s.score !== null && s.score !== undefined ? fmtNum(s.score - stats.mean, 3) : "—"}</td>
              {grpo && <td className="num" data-grpo-advantage>{fmtNum(expected, 3)}</td>}
              <td className="num" data-logged-advantage>{fmtNum(logged, 3)}</td>
            </tr>
          );
        })}
      </tbody>
    </table>
  );
}

export function GroupView({ groups, shade, rule }: { groups: Group[]; shade: Shade; rule: AdvantageRule }) {
  const grpo = rule.estimator === "grpo";
  return (
    <div className="stack">
      {!grpo && (
        <p className="notice small">This run's advantages come from <strong>{rule.estimator}</strong>, not from the group: the mean and std below
          describe the group's scores only.</p>
      )}
      {groups.map((g) => (
        <section key={g.id} className={`card group ${g.degenerate ? "degenerate" : ""}`} data-group={g.id}
          data-mean={g.stats?.mean ?? ""} data-std={g.stats?.std ?? ""}>
          <header className="row">
            <strong>Prompt #{g.promptIndex ?? "—"}</strong>
            <span className="small muted" data-group-summary>
              {g.samples.length} answers · mean {fmtNum(g.stats?.mean ?? null, 3)} · std {fmtNum(g.stats?.std ?? null, 3)}
              {g.stats && g.stats.n > 1 && <span title="the sample std, dividing by n − 1 (torch.std), as GRPO's advantage does"> (n − 1)</span>}
            </span>
            {g.degenerate && <span className="badge alarm-warning" title="all answers scored the same, so every advantage is zero">degenerate group</span>}
          </header>
          <GroupNumbers group={g} rule={rule} />
          <details className="prompt"><summary>Prompt</summary><ModelText text={g.prompt} /></details>
          <div className="group-answers">
            {g.samples.map((s) => <SampleCard key={s.id} sample={s} shade={shade} showPrompt={false} compact />)}
          </div>
        </section>
      ))}
    </div>
  );
}
