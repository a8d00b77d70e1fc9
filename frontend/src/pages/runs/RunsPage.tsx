/** Runs: the table of runs with live status (SSE), filters in the URL, select several → Compare. Each run shows its
 * latest training score and its latest held-out score (what runs are compared by), both sortable. */
import { useQueryClient } from "@tanstack/react-query";
import { useMemo, useState } from "react";
import { Link, useNavigate, useSearchParams } from "react-router-dom";
import { useEventSource } from "../../api/live";
import { ARCHIVED_TAG, isActive, qk, useExperiments, useRuns, useRunsColumns, type RunFilters } from "../../api/queries";
import type { RunsPublic, RunStatus, RunSummary } from "../../client/types.gen";
import { fmtDuration, HealthBadges, Progress, StatusBadge } from "../../components/Badges";
import { PageTitle } from "../../components/Layout";
import { Empty, ErrorBox, Loading } from "../../components/States";
import { fmtDate, fmtNum, secondsBetween } from "../../lib/format";
import { nextRunSort, parseRunSort, runSortParam, sortRuns, type RunSortColumn } from "../../lib/runSort";
import { fromApi, lastFinite, type Series } from "../../lib/series";
import { URL_CONTROL } from "../../lib/urlControl";

const STATUSES: RunStatus[] = ["queued", "starting", "running", "succeeded", "failed", "cancelled", "lost"];
/** KL to the reference: in the reward (PPO) or as a loss (GRPO); the KL column shows the first a run has. */
const KL_KEYS = ["actor/reward_kl_penalty", "actor/kl_loss"];
const COLUMN_KEYS = ["critic/score/mean", ...KL_KEYS];

function useFilters(): [RunFilters, URLSearchParams, (k: string, v: string | null) => void] {
  const [params, setParams] = useSearchParams();
  const filters: RunFilters = {};
  const status = params.getAll("status").filter((s): s is RunStatus => STATUSES.includes(s as RunStatus));
  if (status.length) filters.status = status;
  if (params.get("experiment")) filters.experiment_id = Number(params.get("experiment"));
  if (params.get("tag")) filters.tag = [params.get("tag")!];
  if (params.get("q")) filters.q = params.get("q")!;
  if (params.get("archived") !== "1" && !filters.tag?.includes(ARCHIVED_TAG)) filters.not_tag = [ARCHIVED_TAG];
  const set = (k: string, v: string | null) =>
    setParams((prev) => {
      const next = new URLSearchParams(prev);
      if (v) next.set(k, v);
      else next.delete(k);
      return next;
    }, URL_CONTROL);
  return [filters, params, set];
}

/** Live: the runs feed patches cached rows in place (status, progress, health); unknown runs (new ones)
 *  trigger a refetch. */
function useRunsFeed() {
  const qc = useQueryClient();
  const patch = (data: unknown) => {
    // status and progress events carry the run; a validation's carries its new held-out score (val_score...)
    const run = data as Partial<RunSummary> & { id: number };
    let found = false;
    qc.setQueriesData<RunsPublic>({ queryKey: qk.allRuns }, (old) => {
      if (!old) return old;
      const i = old.data.findIndex((r) => r.id === run.id);
      if (i === -1) return old;
      found = true;
      const data = old.data.slice();
      data[i] = { ...data[i], ...run };
      return { ...old, data };
    });
    qc.setQueryData<RunSummary>(qk.run(run.id), (old) => (old ? { ...old, ...run } : old));
    if (!found) void qc.invalidateQueries({ queryKey: qk.allRuns });
  };
  return useEventSource("/api/v1/runs/events", {
    run: patch,
    // the server judged a step and an alarm fired or cleared: `{id, health}`, the run's new summary
    health: patch,
    progress: patch,
    deleted: () => void qc.invalidateQueries({ queryKey: qk.allRuns }),
  });
}

export function RunsPage() {
  const [filters, params, setFilter] = useFilters();
  const runs = useRuns(filters);
  const experiments = useExperiments();
  const live = useRunsFeed();
  const navigate = useNavigate();
  const [selected, setSelected] = useState<number[]>([]);
  const ids = useMemo(() => (runs.data?.data ?? []).map((r) => r.id).slice(0, 100), [runs.data]);
  const anyActive = (runs.data?.data ?? []).some((r) => isActive(r.status));
  const columns = useRunsColumns(ids, COLUMN_KEYS, anyActive);
  const seriesByRun = useMemo(() => {
    const out = new Map<number, Record<string, Series>>();
    for (const s of columns.data?.data ?? []) {
      if (!out.has(s.run_id)) out.set(s.run_id, {});
      out.get(s.run_id)![s.key] = fromApi(s);
    }
    return out;
  }, [columns.data]);
  const experimentName = new Map((experiments.data?.data ?? []).map((e) => [e.id, e.name]));
  const sort = parseRunSort(params.get("sort"));
  const trainScore = (id: number) => lastFinite(seriesByRun.get(id)?.["critic/score/mean"])?.value ?? null;
  const rows = sortRuns(runs.data?.data ?? [], sort, (r, c) => (c === "val" ? r.val_score : trainScore(r.id)));
  // the held-out key(s) the column shows: each run's first val-core/<source>/(acc|reward)/mean@N key
  const valKeys = [...new Set(rows.map((r) => r.val_score_key).filter((k): k is string => !!k))];
  const valTitle = valKeys.length === 1 ? `latest held-out score: ${valKeys[0]}`
    : `latest held-out score: each run's first val-core/<source>/(acc|reward)/mean@N key${valKeys.length ? ` (${valKeys.join(", ")}); hover a value for its key` : ""}`;
  const sortHeader = (column: RunSortColumn, label: string, title: string) => {
    const active = sort?.column === column;
    return (
      <th className="num" title={title} aria-sort={active ? (sort!.desc ? "descending" : "ascending") : "none"} data-sort-column={column}>
        <button type="button" className="link-like" onClick={() => setFilter("sort", runSortParam(nextRunSort(sort, column)))}>
          {label}{active ? (sort!.desc ? " ▼" : " ▲") : ""}
        </button>
      </th>
    );
  };
  const toggle = (id: number) => setSelected((s) => (s.includes(id) ? s.filter((x) => x !== id) : [...s, id]));

  return (
    <div>
      <PageTitle actions={<>
        <span className="muted small" title="live updates from the server">{live === "live" ? "● live" : live}</span>
        <button type="button" disabled={selected.length < 2} onClick={() => navigate(`/compare?runs=${selected.join(",")}`)}>
          Compare {selected.length ? `(${selected.length})` : ""}
        </button>
        <Link className="button" to="/runs/import" title="a verl or TensorBoard run made elsewhere">Import</Link>
        <Link className="button primary" to="/runs/new">New run</Link>
      </>}>Runs</PageTitle>

      <div className="filters" role="search">
        <input type="search" placeholder="Search names…" aria-label="search runs by name" defaultValue={params.get("q") ?? ""}
          onChange={(e) => setFilter("q", e.target.value.trim() || null)} />
        <select aria-label="status" value={params.get("status") ?? ""} onChange={(e) => setFilter("status", e.target.value || null)}>
          <option value="">any status</option>
          {STATUSES.map((s) => <option key={s} value={s}>{s}</option>)}
        </select>
        <select aria-label="experiment" value={params.get("experiment") ?? ""} onChange={(e) => setFilter("experiment", e.target.value || null)}>
          <option value="">any experiment</option>
          {(experiments.data?.data ?? []).map((e) => <option key={e.id} value={e.id}>{e.name}</option>)}
        </select>
        <input type="search" placeholder="tag" aria-label="tag" defaultValue={params.get("tag") ?? ""}
          onChange={(e) => setFilter("tag", e.target.value.trim() || null)} style={{ width: 120 }} />
        <label className="small"><input type="checkbox" checked={params.get("archived") === "1"}
          onChange={(e) => setFilter("archived", e.target.checked ? "1" : null)} /> show archived</label>
        {runs.isFetching && <span className="spinner" aria-label="refreshing" />}
      </div>

      {runs.isLoading ? <Loading what="Loading runs" /> : runs.error ? <ErrorBox error={runs.error} retry={() => void runs.refetch()} /> :
        !runs.data?.data.length ? (
          <Empty title={Object.keys(filters).some((k) => k !== "not_tag") ? "No runs match these filters." : "No runs yet."}>
            <Link to="/runs/new">Launch one from the New-run form</Link>{filters.not_tag ? " (archived runs are hidden: tick “show archived”)" : ""}
          </Empty>
        ) : (
          <div className="card table-wrap">
            <table className="runs-table">
              <thead>
                <tr>
                  <th aria-label="select" />
                  <th>Name</th><th>Experiment</th><th>Status</th><th>Progress</th>
                  {sortHeader("score", "Train score", "critic/score/mean: the latest training batch's mean score (answers to training prompts, sampled)")}
                  {sortHeader("val", "Held-out", valTitle)}
                  <th className="num">KL</th><th>Health</th><th>Created</th><th className="num">Duration</th>
                </tr>
              </thead>
              <tbody>
                {rows.map((run) => {
                  const series = seriesByRun.get(run.id) ?? {};
                  const kk = KL_KEYS.find((k) => series[k]);
                  const score = trainScore(run.id);
                  const kl = kk ? lastFinite(series[kk]) : null;
                  const duration = secondsBetween(run.started_at, run.finished_at);
                  return (
                    <tr key={run.id} data-run-id={run.id}>
                      <td><input type="checkbox" aria-label={`select ${run.name}`} checked={selected.includes(run.id)} onChange={() => toggle(run.id)} /></td>
                      <td>
                        <Link to={`/runs/${run.id}`}><strong>{run.name || `run ${run.id}`}</strong></Link>
                        {run.tags?.length ? <div className="small muted">{run.tags.join(", ")}</div> : null}
                      </td>
                      <td>{experimentName.get(run.experiment_id) ?? run.experiment_id}</td>
                      <td><StatusBadge status={run.status} /></td>
                      <td><Progress step={run.progress_step} total={run.progress_total} eta={run.status === "running" ? run.eta_seconds : null} /></td>
                      <td className="num" data-train-score>{fmtNum(score, 3)}</td>
                      <td className="num" data-val-score={run.val_score ?? ""}
                        title={run.val_score_key ? `${run.val_score_key}${run.val_score_step !== null && run.val_score_step !== undefined ? ` at step ${run.val_score_step}` : ""}` : "no held-out score logged"}>
                        {fmtNum(run.val_score ?? null, 3)}</td>
                      <td className="num">{fmtNum(kl?.value ?? null, 3)}</td>
                      <td data-health-cell><HealthBadges health={run.health ?? null} runId={run.id} /></td>
                      <td className="small">{fmtDate(run.created_at)}</td>
                      <td className="num small">{duration !== null ? fmtDuration(duration) : "—"}</td>
                    </tr>
                  );
                })}
              </tbody>
            </table>
            <div className="small muted" style={{ marginTop: ".5rem" }}>{runs.data.count} run{runs.data.count === 1 ? "" : "s"} · select two or more to compare</div>
          </div>
        )}
    </div>
  );
}
