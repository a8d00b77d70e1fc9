/**
 * Side by side: two panes, each a run and a step; the same prompt's answers aligned row by row, with the
 * word-level diff highlighted. ←/→ (or j/k) step through the prompts both panes share.
 */
import { useEffect, useMemo, useRef } from "react";
import { Link, useSearchParams } from "react-router-dom";
import { useRuns, useSampleSteps, useSamples } from "../../api/queries";
import type { SamplePublic } from "../../client/types.gen";
import { ScoreBadge } from "../../components/Badges";
import { PageTitle } from "../../components/Layout";
import { Empty, ErrorBox, Loading } from "../../components/States";
import { DiffText, ModelText } from "../../components/Text";
import { side, wordDiff } from "../../lib/wordDiff";

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
  const pos = Math.min(Math.max(0, Number(params.get("p") ?? 0) || 0), Math.max(0, shared.length - 1));

  const set = (patch: Record<string, string | null>) =>
    setParams((prev) => {
      const next = new URLSearchParams(prev);
      for (const [k, v] of Object.entries(patch)) {
        if (v === null) next.delete(k);
        else next.set(k, v);
      }
      return next;
    }, { replace: true });

  // Keys move from the position in the URL as it is now, not as of the last render: a second key pressed
  // before React re-renders must not start again from the old position.
  const sharedCount = useRef(0);
  sharedCount.current = shared.length;
  useEffect(() => {
    const move = (delta: number) => {
      const cur = new URLSearchParams(window.location.search);
      const last = Math.max(0, sharedCount.current - 1);
      const from = Math.min(Math.max(0, Number(cur.get("p") ?? 0) || 0), last);
      const to = Math.min(Math.max(0, from + delta), last);
      if (to === from) return;
      cur.set("p", String(to));
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
      <div className="sbs-panes">
        <PanePicker label="Left" pane={a} runs={runs.data?.data ?? []} onChange={(p) => set({ a: `${p.runId ?? ""}:${p.step ?? ""}`, p: null })} />
        <PanePicker label="Right" pane={b} runs={runs.data?.data ?? []} onChange={(p) => set({ b: `${p.runId ?? ""}:${p.step ?? ""}`, p: null })} />
      </div>

      {a.step === null || b.step === null ? <Empty title="Pick a run and a step for each pane." /> :
        samplesA.isLoading || samplesB.isLoading ? <Loading what="Loading samples" /> :
          samplesA.error || samplesB.error ? <ErrorBox error={samplesA.error ?? samplesB.error} /> :
            shared.length === 0 ? <Empty title="These two steps share no prompt." >Pick steps of runs trained on the same data.</Empty> : (
              <>
                <div className="row card" role="toolbar" aria-label="prompt navigation">
                  <button type="button" disabled={pos === 0} onClick={() => set({ p: String(pos - 1) })} aria-label="previous prompt">←</button>
                  <strong>Prompt #{prompt}</strong>
                  <span className="muted small">{pos + 1} of {shared.length} shared prompts</span>
                  <button type="button" disabled={pos >= shared.length - 1} onClick={() => set({ p: String(pos + 1) })} aria-label="next prompt">→</button>
                  <span className="small muted">keys: <span className="kbd">←</span> <span className="kbd">→</span> or <span className="kbd">k</span> <span className="kbd">j</span></span>
                </div>
                <details className="card prompt" open><summary>Prompt</summary><ModelText text={left[0]?.prompt ?? ""} /></details>
                <div className="sbs-row small muted">
                  <div><Link to={`/runs/${a.runId}/samples?step=${a.step}`}>{runName(a.runId)}</Link> · step {a.step}</div>
                  <div><Link to={`/runs/${b.runId}/samples?step=${b.step}`}>{runName(b.runId)}</Link> · step {b.step}</div>
                </div>
                {Array.from({ length: rows }, (_, i) => {
                  const l = left[i];
                  const r = right[i];
                  const parts = l && r ? wordDiff(l.response ?? "", r.response ?? "") : null;
                  return (
                    <div key={i} className="sbs-row" data-row={i}>
                      <div className="card sample-card compact">
                        {l ? <>
                          <div className="sample-head"><ScoreBadge score={l.score} /><span className="small muted">answer {i + 1}</span></div>
                          {parts ? <DiffText parts={side(parts, "left")} /> : <ModelText text={l.response} />}
                        </> : <span className="muted">—</span>}
                      </div>
                      <div className="card sample-card compact">
                        {r ? <>
                          <div className="sample-head"><ScoreBadge score={r.score} /><span className="small muted">answer {i + 1}</span></div>
                          {parts ? <DiffText parts={side(parts, "right")} /> : <ModelText text={r.response} />}
                        </> : <span className="muted">—</span>}
                      </div>
                    </div>
                  );
                })}
                {left[0]?.ground_truth && <div className="small"><span className="muted">ground truth:</span> <span className="mono">{left[0].ground_truth}</span></div>}
              </>
            )}
    </div>
  );
}

function PanePicker({ label, pane, runs, onChange }: {
  label: string; pane: PaneRef; runs: { id: number; name?: string }[]; onChange: (p: PaneRef) => void;
}) {
  const steps = useSampleSteps(pane.runId);
  const stepValues = [...new Set((steps.data?.data ?? []).map((s) => s.step))];
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
