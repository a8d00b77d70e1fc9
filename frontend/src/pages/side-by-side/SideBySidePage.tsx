/**
 * Side by side: two panes, each a run and a step; the same prompt's answers aligned row by row, with the
 * word-level diff highlighted. ←/→ (or j/k) step through the prompts both panes share. Two steps that share
 * no prompt (neighbouring training steps draw different prompts) are re-paired, and the page says how: the
 * nearest step that answered some of the same prompts, else two validations.
 */
import { useEffect, useMemo, useRef } from "react";
import { Link, useSearchParams } from "react-router-dom";
import { useRuns, useSampleSteps, useSamples, useStepOverlaps } from "../../api/queries";
import type { SamplePublic } from "../../client/types.gen";
import { ScoreBadge } from "../../components/Badges";
import { PageTitle } from "../../components/Layout";
import { Empty, ErrorBox, Loading } from "../../components/States";
import { Conversation } from "../../components/Conversation";
import { Question } from "../../components/Question";
import { DiffText, ModelText } from "../../components/Text";
import { isTrajectory } from "../../lib/conversation";
import { pairFor, type Pairing } from "../../lib/pairSteps";
import { questionOf } from "../../lib/question";
import { side, wordDiff } from "../../lib/wordDiff";
import { URL_CONTROL } from "../../lib/urlControl";

interface PaneRef { runId: number | null; step: number | null }

function parsePane(v: string | null): PaneRef {
  const [r, s] = (v ?? "").split(":");
  const runId = r ? Number(r) : NaN;
  const step = s !== undefined && s !== "" ? Number(s) : NaN;
  return { runId: Number.isFinite(runId) ? runId : null, step: Number.isFinite(step) ? step : null };
}

function byPrompt(samples: SamplePublic[]): Map<number, SamplePublic[]> {
  const m = new Map<number, SamplePublic[]>();
  for (const s of samples) {
    if (s.prompt_index === null || s.prompt_index === undefined) continue;
    if (!m.has(s.prompt_index)) m.set(s.prompt_index, []);
    m.get(s.prompt_index)!.push(s);
  }
  return m;
}

export function SideBySidePage() {
  const [params, setParams] = useSearchParams();
  const a = parsePane(params.get("a"));
  const b = parsePane(params.get("b"));
  const split = params.get("split") === "val" ? "val" : "train";
  const runs = useRuns({});
  const samplesA = useSamples(a.runId, { step: a.step ?? undefined, split, limit: 1000, order: "prompt_index" }, a.step !== null);
  const samplesB = useSamples(b.runId, { step: b.step ?? undefined, split, limit: 1000, order: "prompt_index" }, b.step !== null);
  const mapA = useMemo(() => byPrompt(samplesA.data?.data ?? []), [samplesA.data]);
  const mapB = useMemo(() => byPrompt(samplesB.data?.data ?? []), [samplesB.data]);
  const shared = useMemo(() => [...mapA.keys()].filter((k) => mapB.has(k)).sort((x, y) => x - y), [mapA, mapB]);
  // ?prompt=N opens at that prompt (links from "What changed"); ?p= is the position the keys move
  const promptParam = params.get("prompt");
  const promptPos = promptParam !== null && params.get("p") === null ? shared.indexOf(Number(promptParam)) : -1;
  const pos = promptPos >= 0 ? promptPos : Math.min(Math.max(0, Number(params.get("p") ?? 0) || 0), Math.max(0, shared.length - 1));
  const posRef = useRef(pos);
  posRef.current = pos;

  // no shared prompt: look for a partner step, then switch to it and say so (never a dead end)
  const loaded = a.step !== null && b.step !== null && !!samplesA.data && !!samplesB.data && !samplesA.isFetching && !samplesB.isFetching;
  const disjoint = loaded && shared.length === 0 && mapA.size > 0 && mapB.size > 0;
  const overlaps = useStepOverlaps(disjoint ? b.runId : null, disjoint ? { step: b.step!, split, other_run_id: a.runId!, other_split: split } : null);
  const stepsA = useSampleSteps(disjoint ? a.runId : null);
  const stepsB = useSampleSteps(disjoint ? b.runId : null);
  const pairing: Pairing | null | undefined = useMemo(() => {
    if (!disjoint || !overlaps.data || !stepsA.data || !stepsB.data) return undefined;
    const val = (d: typeof stepsA.data) => (d?.data ?? []).filter((s) => s.split === "val").map((s) => s.step);
    return pairFor({ aStep: a.step!, bStep: b.step!, sameRun: a.runId === b.runId, overlapping: overlaps.data.data.map((o) => o.step),
      aVal: val(stepsA.data), bVal: val(stepsB.data) });
  }, [disjoint, overlaps.data, stepsA.data, stepsB.data, a.step, b.step, a.runId, b.runId]);
  // a pairing that is where we already are found nothing new (two runs whose validation sets differ)
  const stuck = !!pairing && pairing.a === a.step && pairing.b === b.step && pairing.split === split;
  useEffect(() => {
    if (!pairing || stuck) return;
    const next = new URLSearchParams(params);
    next.set("a", `${a.runId}:${pairing.a}`);
    next.set("b", `${b.runId}:${pairing.b}`);
    next.set("split", pairing.split);
    next.set("paired", `${pairing.why}:${a.step}:${b.step}:${split}`);
    next.delete("p");
    setParams(next, { replace: true });
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, [pairing]);
  const paired = (params.get("paired") ?? "").split(":");

  const set = (patch: Record<string, string | null>) =>
    setParams((prev) => {
      const next = new URLSearchParams(prev);
      for (const [k, v] of Object.entries(patch)) {
        if (v === null) next.delete(k);
        else next.set(k, v);
      }
      return next;
    }, URL_CONTROL);

  // Keys move from the position in the URL as it is now, not as of the last render: a second key pressed
  // before React re-renders must not start again from the old position.
  const sharedCount = useRef(0);
  sharedCount.current = shared.length;
  useEffect(() => {
    const move = (delta: number) => {
      const cur = new URLSearchParams(window.location.search);
      const last = Math.max(0, sharedCount.current - 1);
      const from = cur.get("p") === null ? posRef.current : Math.min(Math.max(0, Number(cur.get("p")) || 0), last);
      const to = Math.min(Math.max(0, from + delta), last);
      if (to === from) return;
      cur.set("p", String(to));
      cur.delete("prompt");
      setParams(cur, { replace: true });
    };
    const onKey = (e: KeyboardEvent) => {
      const t = e.target as HTMLElement;
      if (t && ["INPUT", "SELECT", "TEXTAREA"].includes(t.tagName)) return;
      if (e.key === "ArrowRight" || e.key === "j") {
        move(1);
        e.preventDefault();
      } else if (e.key === "ArrowLeft" || e.key === "k") {
        move(-1);
        e.preventDefault();
      }
    };
    window.addEventListener("keydown", onKey);
    return () => window.removeEventListener("keydown", onKey);
  }, [setParams]);

  const prompt = shared[pos];
  const left = prompt !== undefined ? mapA.get(prompt)! : [];
  const right = prompt !== undefined ? mapB.get(prompt)! : [];
  const rows = Math.max(left.length, right.length);
  const runName = (id: number | null) => runs.data?.data.find((r) => r.id === id)?.name ?? (id !== null ? `run ${id}` : "");

  return (
    <div className="stack">
      <PageTitle>Side by side</PageTitle>
      <div className="segmented" role="group" aria-label="split">
        <button type="button" aria-pressed={split === "train"} onClick={() => set({ split: null, p: null, paired: null })}>train</button>
        <button type="button" aria-pressed={split === "val"} onClick={() => set({ split: "val", p: null, paired: null })}>val</button>
      </div>
      <div className="sbs-panes">
        <PanePicker label="Left" pane={a} split={split} runs={runs.data?.data ?? []} onChange={(p) => set({ a: `${p.runId ?? ""}:${p.step ?? ""}`, p: null, paired: null })} />
        <PanePicker label="Right" pane={b} split={split} runs={runs.data?.data ?? []} onChange={(p) => set({ b: `${p.runId ?? ""}:${p.step ?? ""}`, p: null, paired: null })} />
      </div>

      {a.step === null || b.step === null ? <Empty title="Pick a run and a step for each pane." /> :
        samplesA.isLoading || samplesB.isLoading ? <Loading what="Loading samples" /> :
          samplesA.error || samplesB.error ? <ErrorBox error={samplesA.error ?? samplesB.error} /> :
            shared.length === 0 ? (
              mapA.size === 0 || mapB.size === 0 ? <Empty title={`No ${split === "val" ? "validation" : "training"} answers at ${mapA.size === 0 ? `step ${a.step} of the left run` : `step ${b.step} of the right run`}.`}>Pick another step, or the other split.</Empty>
              : pairing === null || stuck ? <Empty title="These two steps share no prompt, and the runs have no validations to compare instead.">Pick steps of runs trained on the same data.</Empty>
                : <Loading what="These two steps share no prompt: finding the nearest steps that do" />
            ) : (
              <>
                {paired.length === 4 && (
                  <p className="notice small" role="status" data-paired={paired[0]}>
                    {paired[0] === "nearest-train"
                      ? <>Training steps {paired[1]} and {paired[2]} share no prompt (each training step draws new prompts): showing step {a.step}, the nearest step that answered some of step {b.step}'s prompts ({shared.length} shared).</>
                      : <>{paired[3] === "train" ? "Training" : "Validation"} steps {paired[1]} and {paired[2]} share no prompt, and no other training step answered these prompts: showing validations {a.step} and {b.step}, which answer the same prompts every time.</>}
                  </p>
                )}
                <div className="row card" role="toolbar" aria-label="prompt navigation">
                  <button type="button" disabled={pos === 0} onClick={() => set({ p: String(pos - 1), prompt: null })} aria-label="previous prompt">←</button>
                  <strong>Prompt #{prompt}</strong>
                  <span className="muted small">{pos + 1} of {shared.length} shared prompts</span>
                  <button type="button" disabled={pos >= shared.length - 1} onClick={() => set({ p: String(pos + 1), prompt: null })} aria-label="next prompt">→</button>
                  <span className="small muted">keys: <span className="kbd">←</span> <span className="kbd">→</span> or <span className="kbd">k</span> <span className="kbd">j</span></span>
                  {/* the diff's own colours (not the green / red of the score badges: a changed word is not a right one) */}
                  <span className="small muted" data-diff-legend>word diff: <del className="diff-removed">only in the left answer</del>{" "}
                    <ins className="diff-added">only in the right answer</ins></span>
                </div>
                <div className="card stack" data-sbs-question>
                  {/* one question for both panes; two where the runs asked it differently (another template or dataset) */}
                  {left[0] && right[0] && questionOf(left[0].prompt).text !== questionOf(right[0].prompt).text ? (
                    <div className="sbs-row"><Question prompt={left[0].prompt} label="question (left)" /><Question prompt={right[0].prompt} label="question (right)" /></div>
                  ) : <Question prompt={(left[0] ?? right[0])?.prompt} />}
                  {(left[0] ?? right[0])?.ground_truth && <div className="small"><span className="muted">ground truth:</span> <span className="mono">{(left[0] ?? right[0])!.ground_truth}</span></div>}
                </div>
                <div className="sbs-row small muted">
                  <div><Link to={`/runs/${a.runId}/samples?step=${a.step}${split === "val" ? "&split=val" : ""}`}>{runName(a.runId)}</Link> · {split === "val" ? "validation" : "step"} {a.step}</div>
                  <div><Link to={`/runs/${b.runId}/samples?step=${b.step}${split === "val" ? "&split=val" : ""}`}>{runName(b.runId)}</Link> · {split === "val" ? "validation" : "step"} {b.step}</div>
                </div>
                {Array.from({ length: rows }, (_, i) => {
                  const l = left[i];
                  const r = right[i];
                  // trajectories read as conversations on both sides (a word diff across turns would mix them)
                  const talk = (l && isTrajectory(l)) || (r && isTrajectory(r));
                  const parts = l && r && !talk ? wordDiff(l.response ?? "", r.response ?? "") : null;
                  return (
                    <div key={i} className="sbs-row" data-row={i}>
                      <div className="card sample-card compact">
                        {l ? <>
                          <div className="sample-head"><ScoreBadge score={l.score} /><span className="small muted">answer {i + 1}</span></div>
                          {isTrajectory(l) ? <Conversation sample={l} /> : parts ? <DiffText parts={side(parts, "left")} /> : <ModelText text={l.response} />}
                        </> : <span className="muted">—</span>}
                      </div>
                      <div className="card sample-card compact">
                        {r ? <>
                          <div className="sample-head"><ScoreBadge score={r.score} /><span className="small muted">answer {i + 1}</span></div>
                          {isTrajectory(r) ? <Conversation sample={r} /> : parts ? <DiffText parts={side(parts, "right")} /> : <ModelText text={r.response} />}
                        </> : <span className="muted">—</span>}
                      </div>
                    </div>
                  );
                })}
              </>
            )}
    </div>
  );
}

function PanePicker({ label, pane, split, runs, onChange }: {
  label: string; pane: PaneRef; split: "train" | "val"; runs: { id: number; name?: string }[]; onChange: (p: PaneRef) => void;
}) {
  const steps = useSampleSteps(pane.runId);
  const stepValues = [...new Set((steps.data?.data ?? []).filter((s) => s.split === split).map((s) => s.step))];
  return (
    <div className="card row" aria-label={`${label} pane`}>
      <strong>{label}</strong>
      <select aria-label={`${label} run`} value={pane.runId ?? ""} onChange={(e) => onChange({ runId: e.target.value ? Number(e.target.value) : null, step: null })}>
        <option value="">run…</option>
        {runs.map((r) => <option key={r.id} value={r.id}>{r.name || `run ${r.id}`}</option>)}
      </select>
      <select aria-label={`${label} step`} value={pane.step ?? ""} disabled={pane.runId === null}
        onChange={(e) => onChange({ runId: pane.runId, step: e.target.value === "" ? null : Number(e.target.value) })}>
        <option value="">step…</option>
        {stepValues.map((s) => <option key={s} value={s}>step {s}</option>)}
      </select>
    </div>
  );
}
