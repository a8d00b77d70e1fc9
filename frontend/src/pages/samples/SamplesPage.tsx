/**
 * Samples of one run: a step slider, filters (score, data source, text), a list view, a GRPO group view
 * (the n answers to one prompt side by side, with the group's std; degenerate groups counted and flagged),
 * and per-answer token shading. All choices live in the URL.
 */
import { useMemo } from "react";
import { Link, useParams, useSearchParams } from "react-router-dom";
import { useRun, useSampleSteps, useSamples, type SampleQuery } from "../../api/queries";
import type { SamplePublic } from "../../client/types.gen";
import { PageTitle } from "../../components/Layout";
import { SampleCard } from "../../components/SampleCard";
import { Empty, ErrorBox, Loading } from "../../components/States";
import { SHADES, type Shade } from "../../components/TokenView";
import { fmtNum } from "../../lib/format";
import { GroupView, groupSamples } from "./GroupView";

const PAGE = 200;

export function SamplesPage() {
  const runId = Number(useParams().runId);
  const [params, setParams] = useSearchParams();
  const run = useRun(runId);
  const steps = useSampleSteps(runId);
  const split = (params.get("split") === "val" ? "val" : "train") as "train" | "val";
  const stepList = useMemo(() => (steps.data?.data ?? []).filter((s) => s.split === split), [steps.data, split]);
  const requested = params.get("step") !== null ? Number(params.get("step")) : null;
  // the step asked for, else the newest; a step without samples snaps to the nearest one that has them
  const stepIndex = stepList.length === 0 ? -1 : requested === null ? stepList.length - 1
    : stepList.reduce((best, s, i) => (Math.abs(s.step - requested) < Math.abs(stepList[best].step - requested) ? i : best), 0);
  const step = stepIndex >= 0 ? stepList[stepIndex].step : null;
  const view = params.get("view") === "groups" ? "groups" : "list";
  const shade = (SHADES.some((s) => s.id === params.get("shade")) ? params.get("shade") : "logprob") as Shade;
  const page = Math.max(0, Number(params.get("page") ?? 0) || 0);
  const query: SampleQuery = { step: step ?? undefined, split, limit: PAGE, skip: page * PAGE, order: "prompt_index" };
  if (params.get("q")) query.q = params.get("q")!;
  if (params.get("min")) query.min_score = Number(params.get("min"));
  if (params.get("max")) query.max_score = Number(params.get("max"));
  if (params.get("source")) query.data_source = params.get("source")!;
  const samples = useSamples(runId, query, step !== null);

  const set = (patch: Record<string, string | null>) =>
    setParams((prev) => {
      const next = new URLSearchParams(prev);
      for (const [k, v] of Object.entries(patch)) {
        if (v === null || v === "") next.delete(k);
        else next.set(k, v);
      }
      if (!("page" in patch)) next.delete("page");
      return next;
    }, { replace: true });

  const data = samples.data?.data ?? [];
  const sources = useMemo(() => [...new Set(data.map((s) => s.data_source).filter(Boolean))] as string[], [data]);
  const groups = useMemo(() => groupSamples(data), [data]);
  const degenerateGroups = groups.filter((g) => g.degenerate).length;
  const other = stepList.length > 1 && stepIndex > 0 ? stepList[stepIndex - 1].step : null;

  return (
    <div className="stack">
      <PageTitle actions={<>
        {step !== null && other !== null && (
          <Link className="button" to={`/side-by-side?a=${runId}:${other}&b=${runId}:${step}&split=${split}`}>Side by side with step {other}</Link>
        )}
        <Link className="button" to={`/runs/${runId}`}>Charts</Link>
      </>}>
        Samples · <Link to={`/runs/${runId}`}>{run.data?.name || `run ${runId}`}</Link>
      </PageTitle>

      {steps.isLoading ? <Loading what="Loading steps" /> : steps.error ? <ErrorBox error={steps.error} /> : stepList.length === 0 ? (
        <Empty title={`No ${split} samples yet.`}>
          {split === "train" ? <button type="button" onClick={() => set({ split: "val" })}>Show validation samples</button>
            : <button type="button" onClick={() => set({ split: null })}>Show training samples</button>}
        </Empty>
      ) : (
        <>
          <div className="card stack">
            <div className="step-slider">
              <label htmlFor="step-slider"><strong>Step {step}</strong></label>
              <input id="step-slider" type="range" min={0} max={stepList.length - 1} value={stepIndex}
                aria-valuetext={`step ${step}`} onChange={(e) => set({ step: String(stepList[Number(e.target.value)].step) })} />
              <span className="small muted">{stepList[stepIndex].count} samples · mean score {fmtNum(stepList[stepIndex].mean_score ?? null, 3)}</span>
              <div className="segmented" role="group" aria-label="split">
                <button type="button" aria-pressed={split === "train"} onClick={() => set({ split: null, step: null })}>train</button>
                <button type="button" aria-pressed={split === "val"} onClick={() => set({ split: "val", step: null })}>val</button>
              </div>
            </div>
            <div className="filters" role="search" style={{ marginBottom: 0 }}>
              <input type="search" placeholder="text in prompt or answer" aria-label="search samples" defaultValue={params.get("q") ?? ""}
                onChange={(e) => set({ q: e.target.value })} />
              <label>score ≥ <input type="number" step="any" style={{ width: 80 }} aria-label="minimum score" defaultValue={params.get("min") ?? ""} onChange={(e) => set({ min: e.target.value })} /></label>
              <label>≤ <input type="number" step="any" style={{ width: 80 }} aria-label="maximum score" defaultValue={params.get("max") ?? ""} onChange={(e) => set({ max: e.target.value })} /></label>
              <select aria-label="data source" value={params.get("source") ?? ""} onChange={(e) => set({ source: e.target.value })}>
                <option value="">any data source</option>
                {[...new Set([...sources, params.get("source") ?? ""])].filter(Boolean).map((s) => <option key={s} value={s}>{s}</option>)}
              </select>
              <div className="segmented" role="group" aria-label="view">
                <button type="button" aria-pressed={view === "list"} onClick={() => set({ view: null })}>list</button>
                <button type="button" aria-pressed={view === "groups"} onClick={() => set({ view: "groups" })}>groups</button>
              </div>
              <label>tokens shaded by{" "}
                <select value={shade} onChange={(e) => set({ shade: e.target.value })}>
                  {SHADES.map((s) => <option key={s.id} value={s.id}>{s.label}</option>)}
                </select>
              </label>
            </div>
          </div>

          {samples.isLoading ? <Loading what="Loading samples" /> : samples.error ? <ErrorBox error={samples.error} /> : data.length === 0 ? (
            <Empty title="No samples match these filters." />
          ) : (
            <>
              <div className="row small muted">
                <span>{samples.data!.count} sample{samples.data!.count === 1 ? "" : "s"}{samples.data!.count > PAGE ? ` · page ${page + 1}` : ""}</span>
                <span>· {groups.length} prompt group{groups.length === 1 ? "" : "s"}</span>
                <span className={degenerateGroups ? "badge alarm-warning" : ""} title="groups whose answers all scored the same: zero advantage, no learning signal">
                  {degenerateGroups} degenerate group{degenerateGroups === 1 ? "" : "s"} (all scores equal)
                </span>
                {samples.data!.count > PAGE && (
                  <span className="row">
                    <button type="button" disabled={page === 0} onClick={() => set({ page: String(page - 1) })}>← previous</button>
                    <button type="button" disabled={(page + 1) * PAGE >= samples.data!.count} onClick={() => set({ page: String(page + 1) })}>next →</button>
                  </span>
                )}
              </div>
              {view === "groups" ? <GroupView groups={groups} shade={shade} /> : (
                <div className="samples-list">
                  {data.map((s: SamplePublic) => <SampleCard key={s.id} sample={s} shade={shade} />)}
                </div>
              )}
            </>
          )}
        </>
      )}
    </div>
  );
}
