/**
 * Samples of one run: a step slider, filters (score, data source, text; turns, tool, tool error for multi-turn
 * runs; stale answers for asynchronous ones), a list view, a GRPO group view
 * (the n answers to one prompt with the numbers the algorithm used), a dense virtualised table, and per-answer
 * token shading (multi-turn answers read as conversations; the token view marks what the loss saw). While the run trains the page follows it (the newest step appears as it arrives) until the
 * user pauses or picks a step. All choices live in the URL.
 */
import { useQueryClient } from "@tanstack/react-query";
import { useEffect, useMemo, useRef } from "react";
import { Link, useParams, useSearchParams } from "react-router-dom";
import { useEventSource } from "../../api/live";
import { downloads, isActive, qk, useRun, useRunTools, useSampleRows, useSampleSteps, useSamples, useStepOverlaps, type SampleQuery } from "../../api/queries";
import type { SamplePublic } from "../../client/types.gen";
import { DownloadMenu } from "../../components/DownloadMenu";
import { PageTitle } from "../../components/Layout";
import { SampleCard } from "../../components/SampleCard";
import { Empty, ErrorBox, Loading, QueryState } from "../../components/States";
import { SHADES, type Shade } from "../../components/TokenView";
import { isTrajectory, turnQuery } from "../../lib/conversation";
import { fmtNum } from "../../lib/format";
import { parseSort, sortParam } from "../../lib/sampleTable";
import { arrivals, countLine, newestComplete, pageSummary, stepId } from "../../lib/samplesPage";
import { isAsyncConfig, offPolicyRows } from "../../lib/staleness";
import { advantageRule, GroupView, groupSamples } from "./GroupView";
import { SampleTable } from "./SampleTable";
import { URL_CONTROL } from "../../lib/urlControl";

/** Answers a page: a list card is ~180 px tall, so 200 made a 36,000 px page (slow to open for a 512-answer step);
 *  the group view keeps a larger page so that a prompt's answers stay together. */
const PAGE: Record<"list" | "groups", number> = { list: 40, groups: 200 };
type View = "list" | "groups" | "table";

export function SamplesPage() {
  const runId = Number(useParams().runId);
  const [params, setParams] = useSearchParams();
  const qc = useQueryClient();
  const run = useRun(runId);
  const steps = useSampleSteps(runId);
  const split = (params.get("split") === "val" ? "val" : "train") as "train" | "val";
  const stepList = useMemo(() => (steps.data?.data ?? []).filter((s) => s.split === split), [steps.data, split]);
  const active = isActive(run.data?.status);
  // while the run trains, its newest step may be half ingested (its answers come a few dozen a request)
  const arrived = useMemo(() => arrivals(steps.data?.data ?? [], active), [steps.data, active]);
  const requested = params.get("step") !== null ? Number(params.get("step")) : null;
  // the step asked for, else the newest complete one; a step without samples snaps to the nearest one that has them
  const stepIndex = stepList.length === 0 ? -1 : requested === null ? newestComplete(stepList, arrived)
    : stepList.reduce((best, s, i) => (Math.abs(s.step - requested) < Math.abs(stepList[best].step - requested) ? i : best), 0);
  // a link names its step: ask for its samples at once rather than after the list of steps (one round trip
  // less before the first paint); once the list is in, a step without samples snaps as above
  const step = stepIndex >= 0 ? stepList[stepIndex].step : steps.isPending && requested !== null ? requested : null;
  const view: View = params.get("view") === "groups" ? "groups" : params.get("view") === "table" ? "table" : "list";
  const shade = (SHADES.some((s) => s.id === params.get("shade")) ? params.get("shade") : "logprob") as Shade;
  const page = Math.max(0, Number(params.get("page") ?? 0) || 0);
  const prompt = params.get("prompt") !== null && params.get("prompt") !== "" ? Number(params.get("prompt")) : null;
  const filters: SampleQuery = { step: step ?? undefined, split };
  if (params.get("q")) filters.q = params.get("q")!;
  if (params.get("min")) filters.min_score = Number(params.get("min"));
  if (params.get("max")) filters.max_score = Number(params.get("max"));
  if (params.get("source")) filters.data_source = params.get("source")!;
  Object.assign(filters, turnQuery(params));
  if (params.get("stale") === "1") filters.stale = true;
  const pageSize = PAGE[view === "groups" ? "groups" : "list"];
  const query: SampleQuery = { ...filters, limit: pageSize, skip: page * pageSize, order: "prompt_index",
    ...(prompt !== null && Number.isFinite(prompt) ? { prompt_index: prompt } : {}) };
  const samples = useSamples(runId, query, step !== null && view !== "table");
  const { step: _s, ...rowFilters } = filters;
  const rows = useSampleRows(runId, { ...rowFilters, step: step !== null ? [step] : [], limit: 50_000 }, step !== null && view === "table");

  // live: while the run can still log samples, new steps arrive over its event stream (unless paused)
  const refreshStep = useRefreshWhenIdle([qk.samplesOf(runId), qk.sampleRowsOf(runId)]);
  const paused = params.get("live") === "0";
  const following = active && !paused && requested === null;
  const live = useEventSource(active && !paused ? `/api/v1/runs/${runId}/events` : null, {
    samples: (data) => {
      void qc.invalidateQueries({ queryKey: qk.sampleSteps(runId) });
      void qc.invalidateQueries({ queryKey: qk.runTools(runId) });  // answers may call a tool for the first time
      const batches = (data as { batches?: { step: number; split: string }[] } | null)?.batches ?? [];
      // more answers of the step on screen: refresh it too
      if (batches.some((b) => b.step === step && b.split === split)) refreshStep();
    },
    status: () => void qc.invalidateQueries({ queryKey: qk.run(runId) }),
    // (re)connected, e.g. after a pause: steps logged meanwhile came with no event
    hello: () => void qc.invalidateQueries({ queryKey: qk.sampleSteps(runId) }),
  });

  const set = (patch: Record<string, string | null>) =>
    setParams((prev) => {
      const next = new URLSearchParams(prev);
      for (const [k, v] of Object.entries(patch)) {
        if (v === null || v === "") next.delete(k);
        else next.set(k, v);
      }
      if (!("page" in patch)) next.delete("page");
      return next;
    }, URL_CONTROL);

  const shownArrival = stepIndex >= 0 ? arrived.get(stepId(stepList[stepIndex])) : undefined;
  // following the run while its newest step arrives: say so beside the step on screen
  const newest = stepList.length ? stepList[stepList.length - 1] : null;
  const newestArrival = newest ? arrived.get(stepId(newest)) : undefined;
  const arrivingNote = newest && newest.step !== step && newestArrival?.complete === false
    ? ` (step ${newest.step} arriving: ${countLine(newest.count, newestArrival)})` : "";

  const data = samples.data?.data ?? [];
  const sources = useMemo(() => [...new Set(data.map((s) => s.data_source).filter(Boolean))] as string[], [data]);
  const rule = useMemo(() => advantageRule(run.data?.resolved_config as Record<string, unknown> | undefined), [run.data?.resolved_config]);
  const groups = useMemo(() => groupSamples(data, rule), [data, rule]);
  const degenerateGroups = groups.filter((g) => g.degenerate).length;
  const multiAnswer = groups.some((g) => g.samples.length > 1);
  // while the next step loads, the answers of the one before stay on screen: say so (the slider already names the new step)
  const shownStep = view === "table" ? rows.data?.data[0]?.step ?? null : data.length ? data[0].step : null;
  const stale = (view === "table" ? rows.isPlaceholderData : samples.isPlaceholderData) && shownStep !== null && shownStep !== step;
  const staleNote = stale && (
    <p className="notice small" role="status" data-stale-step={shownStep}>Loading step {step}… the answers below are still step {shownStep}'s.</p>
  );
  const sort = parseSort(params.get("sort"));
  // the turn / tool filters: for runs with multi-turn rollouts (or when one is set in the URL)
  const multiTurn = Boolean((run.data?.resolved_config as { actor_rollout_ref?: { rollout?: { multi_turn?: { enable?: boolean } } } } | undefined)
    ?.actor_rollout_ref?.rollout?.multi_turn?.enable) || data.some(isTrajectory) || ["turns", "tool", "tool_error"].some((k) => params.get(k));
  // the run's tools (its tool config's and those its answers called, from the server: a filtered page may show
  // none of them), and the one in the URL
  const runTools = useRunTools(runId, multiTurn);
  // the stale-only filter: for asynchronous runs, runs whose answers lag (or when it is set in the URL)
  const asyncRun = isAsyncConfig(run.data?.resolved_config as Record<string, unknown> | undefined) || offPolicyRows(data)
    || params.get("stale") === "1";
  const urlTool = params.get("tool") && !["*", "-"].includes(params.get("tool")!) ? params.get("tool")! : null;
  const toolNames = [...new Set([...(runTools.data?.data ?? []).map((t) => t.name), ...(urlTool ? [urlTool] : [])])];

  return (
    <div className="stack">
      <PageTitle actions={<>
        {step !== null && <SideBySideLink runId={runId} step={step} split={split} steps={stepList.map((s) => s.step)}
          valSteps={(steps.data?.data ?? []).filter((s) => s.split === "val").map((s) => s.step)} />}
        <Link className="button" to={`/runs/${runId}/changes`}>What changed</Link>
        <Link className="button" to={`/runs/${runId}`}>Charts</Link>
        <DownloadMenu items={[
          ...(["jsonl", "csv", "parquet"] as const).map((f) => ({
            label: `Step ${step ?? "—"}, as filtered, ${f.toUpperCase()}`, run: () => downloads.samples(runId, f, { ...filters, ...(prompt !== null ? { prompt_index: prompt } : {}) }) })),
          ...(["jsonl", "csv", "parquet"] as const).map((f) => ({
            label: `Every ${split} step, as filtered, ${f.toUpperCase()}`, run: () => downloads.samples(runId, f, { ...filters, step: undefined }) })),
        ]} />
      </>}>
        Samples · <Link to={`/runs/${runId}`}>{run.data?.name || `run ${runId}`}</Link>
      </PageTitle>

      {active && (
        <div className="row small live-badge" data-live={following ? "following" : paused ? "paused" : "pinned"}>
          {following ? <>
            <span title="a step appears once all its answers are in">{live === "live" ? "● live" : live}: showing the newest complete step{arrivingNote}</span>
            <button type="button" onClick={() => set({ live: "0", step: step !== null ? String(step) : null })}>Pause</button>
          </> : <>
            <span className="muted">{paused ? "Paused" : `Showing step ${step}`}: the run is still training{stepList.length && step !== stepList[stepList.length - 1].step ? ` (newest step ${stepList[stepList.length - 1].step})` : ""}.</span>
            <button type="button" onClick={() => set({ live: null, step: null })}>Follow the newest step</button>
          </>}
        </div>
      )}

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
              <span className="small muted" title="every answer of this step and split, before the filters">{countLine(stepList[stepIndex].count, shownArrival)} · mean score{shownArrival?.complete === false ? " so far" : ""} {fmtNum(stepList[stepIndex].mean_score ?? null, 3)}</span>
              {shownArrival?.complete === false && <span className="badge neutral" data-arriving title="the run is still sending this step's answers">still arriving</span>}
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
              {multiTurn && <>
                <label>turns <input type="number" min={1} step={1} style={{ width: 64 }} aria-label="number of turns"
                  title="conversation turns: the prompt, each model turn, each tool answer" defaultValue={params.get("turns") ?? ""}
                  onChange={(e) => set({ turns: e.target.value })} /></label>
                <select aria-label="tool used" value={params.get("tool") ?? ""} onChange={(e) => set({ tool: e.target.value })}>
                  <option value="">any or no tool</option>
                  <option value="*">used a tool</option>
                  <option value="-">used no tool</option>
                  {toolNames.map((t) => <option key={t} value={t}>used {t}</option>)}
                </select>
                <select aria-label="tool error" value={params.get("tool_error") ?? ""} onChange={(e) => set({ tool_error: e.target.value })}>
                  <option value="">with or without tool errors</option>
                  <option value="1">with a tool error</option>
                  <option value="0">without tool errors</option>
                </select>
              </>}
              {asyncRun && <label title="answers whose newest token is older than the weights their step trained (verl's trajectory staleness > 0)">
                <input type="checkbox" aria-label="stale only" checked={params.get("stale") === "1"}
                  onChange={(e) => set({ stale: e.target.checked ? "1" : null })} /> stale only</label>}
              <div className="segmented" role="group" aria-label="view">
                <button type="button" aria-pressed={view === "list"} onClick={() => set({ view: null })}>list</button>
                <button type="button" aria-pressed={view === "groups"} onClick={() => set({ view: "groups" })}>groups</button>
                <button type="button" aria-pressed={view === "table"} onClick={() => set({ view: "table", prompt: null })}>table</button>
              </div>
              {view !== "table" && <label>tokens shaded by{" "}
                <select value={shade} onChange={(e) => set({ shade: e.target.value })}>
                  {SHADES.map((s) => <option key={s.id} value={s.id}>{s.label}</option>)}
                </select>
              </label>}
              {prompt !== null && view !== "table" && (
                <span className="badge neutral">prompt #{prompt} <button type="button" className="link-like" aria-label="show every prompt" onClick={() => set({ prompt: null })}>×</button></span>
              )}
            </div>
          </div>

          {view === "table" ? (<>
            {staleNote}
            <QueryState query={rows} what="Loading answers" empty={(d) => d.count === 0 ? <Empty title="No samples match these filters." /> : null}>
              {(d) => <SampleTable rows={d.data} total={d.count} sort={sort} onSort={(s) => set({ sort: sortParam(s) })}
                filter={params.get("tf") ?? ""} onFilter={(t) => set({ tf: t })}
                onOpen={(r) => set({ view: "groups", prompt: r.prompt_index !== null && r.prompt_index !== undefined ? String(r.prompt_index) : null })} />}
            </QueryState>
          </>) : samples.isLoading ? <Loading what="Loading samples" /> : samples.error ? <ErrorBox error={samples.error} /> : data.length === 0 ? (
            <Empty title="No samples match these filters." />
          ) : (
            <>
              {staleNote}
              <div className="row small muted">
                <span data-page-summary>{stale ? `step ${shownStep}: ` : ""}{pageSummary(samples.data!.count, pageSize, page * pageSize, data.length, groups.map((g) => g.samples.length))}</span>
                {multiAnswer && (
                  <span className={degenerateGroups ? "badge alarm-warning" : ""} title="prompts whose answers all scored the same: zero advantage, no learning signal">
                    · {degenerateGroups} degenerate group{degenerateGroups === 1 ? "" : "s"} (all scores equal)
                  </span>
                )}
                {samples.data!.count > pageSize && (
                  <Pager page={page} pages={Math.ceil(samples.data!.count / pageSize)} onPage={(p) => set({ page: p ? String(p) : null })} />
                )}
              </div>
              {view === "groups" ? <div className={stale ? "stale" : ""}><GroupView groups={groups} shade={shade} rule={rule} /></div> : (
                <div className={`samples-list ${stale ? "stale" : ""}`}>
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

/**
 * Side by side needs two steps that answered the same prompts. Validations always do; training steps
 * draw fresh prompts, so the partner is the nearest step that shares some, else two validations.
 */
function SideBySideLink({ runId, step, split, steps, valSteps }: {
  runId: number; step: number; split: "train" | "val"; steps: number[]; valSteps: number[];
}) {
  const overlaps = useStepOverlaps(split === "train" ? runId : null, { step, split });
  if (split === "val") {
    const i = steps.indexOf(step);
    const other = i > 0 ? steps[i - 1] : steps.length > 1 ? steps[1] : null;
    return other === null ? null : (
      <Link className="button" to={`/side-by-side?a=${runId}:${Math.min(other, step)}&b=${runId}:${Math.max(other, step)}&split=val`}>Side by side with validation {other}</Link>
    );
  }
  if (overlaps.isLoading) return <button type="button" disabled>Side by side…</button>;
  const near = overlaps.data?.data[0];
  if (near) {
    const [a, b] = near.step < step ? [near.step, step] : [step, near.step];
    return (
      <Link className="button" to={`/side-by-side?a=${runId}:${a}&b=${runId}:${b}&split=train`}
        title={`the nearest step that answered some of the same prompts (${near.shared_prompts} shared); neighbouring training steps draw different prompts`}>
        Side by side with step {near.step} ({near.shared_prompts} shared prompt{near.shared_prompts === 1 ? "" : "s"})
      </Link>
    );
  }
  if (valSteps.length >= 2) {
    const [a, b] = [valSteps[0], valSteps[valSteps.length - 1]];
    return (
      <Link className="button" to={`/side-by-side?a=${runId}:${a}&b=${runId}:${b}&split=val`}
        title="no other training step answered this step's prompts; validations always share theirs">
        Side by side: validations {a} and {b}
      </Link>
    );
  }
  return null;
}

/** Page through a step's answers: first, previous, any page, next, last. */
function Pager({ page, pages, onPage }: { page: number; pages: number; onPage: (page: number) => void }) {
  return (
    <span className="row" role="navigation" aria-label="pages of answers">
      <button type="button" disabled={page === 0} onClick={() => onPage(0)} aria-label="first page">«</button>
      <button type="button" disabled={page === 0} onClick={() => onPage(page - 1)}>← previous</button>
      <select aria-label="page" value={Math.min(page, pages - 1)} onChange={(e) => onPage(Number(e.target.value))}>
        {Array.from({ length: pages }, (_, i) => <option key={i} value={i}>page {i + 1} of {pages}</option>)}
      </select>
      <button type="button" disabled={page + 1 >= pages} onClick={() => onPage(page + 1)}>next →</button>
      <button type="button" disabled={page + 1 >= pages} onClick={() => onPage(pages - 1)} aria-label="last page">»</button>
    </span>
  );
}

/**
 * Refetch the queries under `keys` after new answers of the step on screen, but never cancel a fetch in flight:
 * the answers of a step arrive a few dozen a request, and each refetch cancelling the last kept a freshly picked
 * step from ever loading ("Loading step N…" stayed). One refetch follows the fetch in flight.
 */
function useRefreshWhenIdle(keys: readonly (readonly unknown[])[]): () => void {
  const qc = useQueryClient();
  const pending = useRef(false);
  const keysRef = useRef(keys);
  keysRef.current = keys;
  const flush = () => {
    if (!pending.current || keysRef.current.some((queryKey) => qc.isFetching({ queryKey }) > 0)) return;
    pending.current = false;
    for (const queryKey of keysRef.current) void qc.invalidateQueries({ queryKey }, { cancelRefetch: false });
  };
  useEffect(() => qc.getQueryCache().subscribe(() => flush()), [qc]); // a fetch ended: the one waiting may go
  return () => {
    pending.current = true;
    flush();
  };
}
