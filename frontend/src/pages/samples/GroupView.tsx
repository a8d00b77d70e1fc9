/** GRPO groups: the n answers to one prompt side by side, with scores, advantages and the group's std. */
import type { SamplePublic } from "../../client/types.gen";
import { SampleCard } from "../../components/SampleCard";
import type { Shade } from "../../components/TokenView";
import { ModelText } from "../../components/Text";
import { fmtNum } from "../../lib/format";

export interface Group {
  id: string;
  prompt: string;
  promptIndex: number | null;
  samples: SamplePublic[];
  mean: number | null;
  std: number | null;
  degenerate: boolean; // every answer scored the same: zero advantage for all of them
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
    const mean = scores.length ? scores.reduce((a, b) => a + b, 0) / scores.length : null;
    const std = mean !== null && scores.length ? Math.sqrt(scores.reduce((a, b) => a + (b - mean) ** 2, 0) / scores.length) : null;
    return {
      id, prompt: list[0].prompt ?? "", promptIndex: list[0].prompt_index ?? null, samples: list, mean, std,
      degenerate: list.length > 1 && scores.length === list.length && scores.every((v) => v === scores[0]),
    };
  });
}

export function GroupView({ groups, shade }: { groups: Group[]; shade: Shade }) {
  return (
    <div className="stack">
      {groups.map((g) => (
        <section key={g.id} className={`card group ${g.degenerate ? "degenerate" : ""}`} data-group={g.id}>
          <header className="row">
            <strong>Prompt #{g.promptIndex ?? "—"}</strong>
            <span className="small muted">{g.samples.length} answers · mean {fmtNum(g.mean, 3)} · std {fmtNum(g.std, 3)}</span>
            {g.degenerate && <span className="badge alarm-warning" title="all answers scored the same, so every advantage is zero">degenerate group</span>}
          </header>
          <details className="prompt"><summary>Prompt</summary><ModelText text={g.prompt} /></details>
          <div className="group-answers">
            {g.samples.map((s) => <SampleCard key={s.id} sample={s} shade={shade} showPrompt={false} compact />)}
          </div>
        </section>
      ))}
    </div>
  );
}
