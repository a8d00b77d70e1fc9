/**
 * GRPO groups: the n answers to one prompt side by side, with the numbers the algorithm used: the group's
 * mean reward, its std with n − 1 (what GRPO divides by), and each answer's advantage worked out next to the
 * advantage the run logged. A group of one (one answer per prompt, e.g. PPO) has no group statistic: its mean is
 * its score, and the page says so instead of showing GRPO's stand-in mean 0 and std 1.
 */
import type { SamplePublic } from "../../client/types.gen";
import { meanAdvantage, SampleCard } from "../../components/SampleCard";
import { Question } from "../../components/Question";
import type { Shade } from "../../components/TokenView";
import { fmtNum } from "../../lib/format";
import { grpoAdvantage, groupStats, loggedGroupStats, type GroupStats } from "../../lib/grpo";

/** How the run turned scores into advantages (from its resolved config). */
export interface AdvantageRule {
  estimator: string;
  normByStd: boolean;
}

export function advantageRule(config: Record<string, unknown> | undefined): AdvantageRule {
  const alg = (config?.algorithm ?? {}) as { adv_estimator?: string; norm_adv_by_std_in_grpo?: boolean };
  return { estimator: alg.adv_estimator ?? "grpo", normByStd: alg.norm_adv_by_std_in_grpo ?? true };
}

export interface Group {
  id: string;
  prompt: string;
  promptIndex: number | null;
  samples: SamplePublic[];
  /** what the numbers are over: for GRPO each answer's reward (what its advantage reads), else its score */
  values: (number | null)[];
  /** "reward" where a GRPO run's rewards differ from its scores (the KL penalty in the reward) */
  valueName: "score" | "reward";
  /** over the answers shown; null when some have no value */
  stats: GroupStats | null;
  /** GRPO: the logged advantages do not follow from the answers shown alone (some of the group is filtered out
   * or on another page); `used` then holds the mean and std read back from them, where they can be */
  partial: boolean;
  used: { mean: number; std: number | null } | null;
  degenerate: boolean; // every answer scored the same: zero advantage for all of them
}

const finite = (v: number | null | undefined): v is number => v !== null && v !== undefined && Number.isFinite(v);

export function groupSamples(samples: SamplePublic[], rule: AdvantageRule): Group[] {
  const grpo = rule.estimator === "grpo";
  const map = new Map<string, SamplePublic[]>();
  for (const s of samples) {
    const id = s.group_uid ?? `prompt-${s.prompt_index ?? s.id}`;
    if (!map.has(id)) map.set(id, []);
    map.get(id)!.push(s);
  }
  return [...map.entries()].map(([id, list]) => {
    const values = list.map((s) => (grpo ? (finite(s.reward) ? s.reward : s.score) : s.score) ?? null);
    const valueName = grpo && list.some((s, i) => values[i] !== (s.score ?? null)) ? "reward" : "score";
    const stats = values.every(finite) ? groupStats(values as number[]) : null;
    let partial = false;
    let used: Group["used"] = null;
    if (grpo && stats) {
      const logged = list.map(meanAdvantage);
      partial = list.some((_, i) => {
        const a = logged[i];
        return a !== null && Math.abs(grpoAdvantage(values[i]!, stats, rule.normByStd) - a) > 1e-3 * Math.max(1, Math.abs(a));
      });
      if (partial) used = loggedGroupStats(values as number[], logged, rule.normByStd);
    }
    return { id, prompt: list[0].prompt ?? "", promptIndex: list[0].prompt_index ?? null, samples: list, values, valueName,
      stats, partial, used, degenerate: list.length > 1 && stats !== null && stats.degenerate && !partial };
  });
}

/** The group's line: how many answers, their mean, their std (or why there is none). */
export function groupSummary(g: Pick<Group, "samples" | "stats" | "valueName">): string {
  const n = g.samples.length;
  const mean = g.valueName === "reward" ? "mean reward" : "mean";
  if (!g.stats) return `${n} answer${n === 1 ? "" : "s"} · some have no ${g.valueName}: no group statistic`;
  if (g.stats.std === null) return `1 answer · ${mean} ${fmtNum(g.stats.mean, 3)} · no group statistic (one answer per prompt)`;
  return `${n} answers · ${mean} ${fmtNum(g.stats.mean, 3)} · std ${fmtNum(g.stats.std, 3)}`;
}

function GroupNumbers({ group, rule }: { group: Group; rule: AdvantageRule }) {
  const { stats } = group;
  if (!stats) return null;
  const grpo = rule.estimator === "grpo";
  const single = stats.std === null;
  return (
    <>
      {grpo && single && (
        <p className="small muted" data-single-note>One answer to this prompt: no group to compare it with. GRPO then subtracts 0 and
          divides by 1 (the engine's convention), so the advantage is the {group.valueName} itself.</p>
      )}
      {group.partial && (
        <p className="notice warn small" data-partial>
          The logged advantages do not follow from the {group.samples.length} answer{group.samples.length === 1 ? "" : "s"} shown
          alone: part of the group is likely filtered out or on another page.
          {group.used ? <> GRPO used mean <strong data-used-mean={group.used.mean}>{fmtNum(group.used.mean, 3)}</strong>
            {group.used.std !== null && <> and std <strong data-used-std={group.used.std}>{fmtNum(group.used.std, 3)}</strong></>}, read
            back from the logged advantages.</> : " The numbers GRPO used cannot be read back from them."}
        </p>
      )}
      <table className="group-numbers small" data-group-numbers>
        <thead>
          <tr>
            <th>answer</th><th className="num">{group.valueName}</th>
            {!single && <th className="num">{group.valueName} − mean</th>}
            {grpo && <th className="num">{single ? "advantage (GRPO, group of one)" : rule.normByStd ? "÷ (std + 1e-6) = advantage" : "advantage (no std division)"}</th>}
            <th className="num" title="mean of the advantage over the answer's tokens, as logged by the run">advantage used</th>
          </tr>
        </thead>
        <tbody>
          {group.samples.map((s, i) => {
            const v = group.values[i];
            const expected = v !== null ? grpoAdvantage(v, stats, rule.normByStd) : null;
            return (
              <tr key={s.id} data-answer={i + 1}>
                <td>{i + 1}</td>
                <td className="num" data-score>{fmtNum(v, 3)}</td>
                {!single && <td className="num">{v !== null ? fmtNum(v - stats.mean, 3) : "—"}</td>}
                {grpo && <td className="num" data-grpo-advantage>{fmtNum(expected, 3)}</td>}
                <td className="num" data-logged-advantage>{fmtNum(meanAdvantage(s), 3)}</td>
              </tr>
            );
          })}
        </tbody>
      </table>
    </>
  );
}

export function GroupView({ groups, shade, rule }: { groups: Group[]; shade: Shade; rule: AdvantageRule }) {
  const grpo = rule.estimator === "grpo";
  const singles = groups.length > 0 && groups.every((g) => g.samples.length === 1);
  return (
    <div className="stack">
      {!grpo && (
        <p className="notice small">This run's advantages come from <strong>{rule.estimator}</strong>, not from the group: the mean and std below
          describe the group's scores only.</p>
      )}
      {singles && (
        <p className="notice small" data-singles>Every prompt here has one answer (rollout.n = 1): there are no group statistics to show,
          only each answer's score.</p>
      )}
      {groups.map((g) => (
        <section key={g.id} className={`card group ${g.degenerate ? "degenerate" : ""}`} data-group={g.id}
          data-mean={g.stats?.mean ?? ""} data-std={g.stats?.std ?? ""}>
          <header className="row">
            <strong>Prompt #{g.promptIndex ?? "—"}</strong>
            <span className="small muted" data-group-summary>
              {groupSummary(g)}
              {g.stats && g.stats.std !== null && <span title="the sample std, dividing by n − 1 (torch.std), as GRPO's advantage does"> (n − 1)</span>}
            </span>
            {g.degenerate && <span className="badge alarm-warning" title="all answers scored the same, so every advantage is zero">degenerate group</span>}
          </header>
          <Question prompt={g.prompt} />
          <GroupNumbers group={g} rule={rule} />
          <div className="group-answers">
            {g.samples.map((s) => <SampleCard key={s.id} sample={s} shade={shade} showPrompt={false} compact />)}
          </div>
        </section>
      ))}
    </div>
  );
}
