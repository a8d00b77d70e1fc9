/** Run: status and actions, health banner, live charts, config, live log tail. */
import { useMutation, useQueryClient } from "@tanstack/react-query";
import { useMemo, useRef, useState } from "react";
import { Link, useNavigate, useParams } from "react-router-dom";
import { onHealthStreamEvent, useRunHealth } from "../../api/health";
import { useLiveMetrics } from "../../api/liveMetrics";
import { catchUpRun, downloads, isActive, qk, runWrites, useExperiments, useRun, useRunQueue } from "../../api/queries";
import { DownloadMenu } from "../../components/DownloadMenu";
import type { RunPublic } from "../../client/types.gen";
import { fmtDuration, Progress, StatusBadge } from "../../components/Badges";
import { ChartControls, useChartOptions } from "../../components/ChartControls";
import { PageTitle } from "../../components/Layout";
import { MetricCharts } from "../../components/MetricCharts";
import { Empty, ErrorBox, Loading } from "../../components/States";
import { fmtDate, secondsBetween } from "../../lib/format";
import { CHARTS } from "../../lib/charts";
import { exactFact } from "../../lib/exactMode";
import { deviceFact, parameterFact, planFact } from "../../lib/runFacts";
import { isAsyncConfig, loggedOffPolicy, withStaleness } from "../../lib/staleness";
import { ConfigView } from "./ConfigView";
import { PlanView } from "./PlanView";
import { HealthPanel } from "./HealthPanel";
import { LogTail, useLogTail } from "./LogTail";
import { RunManage } from "./RunManage";
import { WebhookPanel } from "./WebhookPanel";

export function RunPage() {
  const runId = Number(useParams().runId);
  const run = useRun(runId);
  if (run.isLoading) return <Loading what="Loading run" />;
  if (run.error) return <ErrorBox error={run.error} retry={() => void run.refetch()} />;
  if (!run.data) return <Empty title={`Run ${runId} not found.`} />;
  return <RunView run={run.data} />;
}

function RunView({ run }: { run: RunPublic }) {
  const qc = useQueryClient();
  const navigate = useNavigate();
  const experiments = useExperiments();
  const [options, setOptions] = useChartOptions();
  const active = isActive(run.status);
  const logs = useLogTail(run.id);
  const [actionError, setActionError] = useState<unknown>(null);

  // health is the server's judgement: fetched, then replaced by the stream's `health` events
  const health = useRunHealth(run.id);
  const catchUp = useRef<ReturnType<typeof catchUpRun> | null>(null);
  const store = useLiveMetrics([run.id], null, active ? [run.id] : [], 1000, (_id, kind, data) => {
    onHealthStreamEvent(qc, run.id, kind, data);
    if (kind === "hello") catchUp.current = catchUpRun(qc, run.id);
    if (kind === "status" || kind === "progress") {
      catchUp.current?.note(data as Partial<RunPublic>);
      qc.setQueryData<RunPublic>(qk.run(run.id), (old) => (old ? { ...old, ...(data as Partial<RunPublic>) } : old));
    } else if (kind === "logs") {
      logs.append(data as { lines: [number, string, number][] });
    }
  });

  // a resumed run's charts start where its parent's stopped: draw the parent's history before them
  const resumedFrom = run.parent_relation === "resume" && run.parent_id ? run.parent_id : null;
  const parentStore = useLiveMetrics(resumedFrom ? [resumedFrom] : [], null, [], 1000);
  const charted = useMemo(() => resumedFrom === null ? store : {
    ...store,
    byRun: new Map([...parentStore.byRun, ...store.byRun]),
    version: store.version + parentStore.version,
    epoch: store.epoch + parentStore.epoch,
    loading: store.loading || parentStore.loading,
    error: store.error ?? parentStore.error,
  }, [store, parentStore, resumedFrom]);
  const chartRuns = [
    ...(resumedFrom ? [{ id: resumedFrom, name: `run ${resumedFrom} (resumed from)` }] : []),
    { id: run.id, name: run.name || `run ${run.id}` },
  ];

  // the staleness chart: asynchronous runs, or any run that trained off-policy (a sync run's is flat at 0)
  const offPolicy = isAsyncConfig(run.resolved_config as Record<string, unknown> | undefined)
    || [...charted.byRun.values()].some((series) => loggedOffPolicy(series));
  const charts = useMemo(() => withStaleness(CHARTS, offPolicy), [offPolicy]);

  const action = useMutation({
    mutationFn: async (kind: "cancel" | "resume") => {
      return kind === "cancel" ? runWrites.cancel(run.id) : runWrites.resume(run.id);
    },
    onMutate: () => setActionError(null),
    onError: (e) => setActionError(e),
    onSuccess: (result, kind) => {
      void qc.invalidateQueries({ queryKey: qk.allRuns });
      if (kind === "resume") navigate(`/runs/${result.id}`);
      else qc.setQueryData(qk.run(run.id), result);
    },
  });

  const duration = secondsBetween(run.started_at, run.finished_at);
  const experiment = experiments.data?.data.find((e) => e.id === run.experiment_id);
  const parameters = parameterFact(run.facts);
  const criticParameters = parameterFact(run.facts, "critic");
  const device = deviceFact(run.facts);
  const exact = exactFact(run.resolved_config as Record<string, unknown> | undefined, store.byRun.get(run.id));
  return (
    <div className="stack">
      <PageTitle actions={<>
        <Link className="button" to={`/runs/${run.id}/samples`}>Samples</Link>
        <Link className="button" to={`/runs/${run.id}/changes`}>What changed</Link>
        <Link className="button" to={`/compare?runs=${run.id}`}>Compare…</Link>
        {active && <button type="button" className="danger" disabled={action.isPending} onClick={() => action.mutate("cancel")}>Cancel</button>}
        {!active && <button type="button" disabled={action.isPending} onClick={() => action.mutate("resume")} title="continue from the last checkpoint">Resume</button>}
        <Link className="button" to={`/runs/new?fork=${run.id}`}>Fork</Link>
        <DownloadMenu items={[
          { label: "Metrics as CSV (one row per step)", run: () => downloads.metrics(run.id, "csv") },
          { label: "Metrics as Parquet", run: () => downloads.metrics(run.id, "parquet") },
          { label: "Every sample as JSONL", run: () => downloads.samples(run.id, "jsonl", {}) },
        ]} />
      </>}>
        {run.name || `run ${run.id}`} <StatusBadge status={run.status} />
      </PageTitle>

      <div className="row small muted run-meta">
        <span>#{run.id}</span>
        <span>experiment <strong>{experiment?.name ?? run.experiment_id}</strong></span>
        {run.preset && <span>preset <strong>{run.preset}</strong></span>}
        <span>created {fmtDate(run.created_at)}</span>
        {duration !== null && <span>duration {fmtDuration(duration)}</span>}
        {run.parent_id && <span>{run.parent_relation ?? "child"} of <Link to={`/runs/${run.parent_id}`}>run {run.parent_id}</Link></span>}
        {device && <span data-fact="device">on <strong>{device}</strong></span>}
        {parameters && <span data-fact="parameters" title={parameters.title}>{criticParameters && "actor "}<strong>{parameters.text}</strong></span>}
        {criticParameters && <span data-fact="critic-parameters" title={criticParameters.title}>critic <strong>{criticParameters.text}</strong></span>}
        {exact && <span data-fact="exact" title={exact.title}><strong>{exact.text}</strong></span>}
        <Progress step={run.progress_step} total={run.progress_total} eta={run.status === "running" ? run.eta_seconds : null} />
      </div>

      {actionError !== null && <ErrorBox error={actionError} />}
      {run.error && run.status !== "cancelled" && (
        <div className="notice error" role="alert"><strong>{run.status}:</strong> <span className="mono">{run.error}</span></div>
      )}
      {(run.status === "queued" || run.status === "starting") && <QueueNote runId={run.id} />}
      {health.error ? <ErrorBox error={health.error} /> : <HealthPanel health={health.data} runId={run.id} />}

      <ChartControls options={options} onChange={setOptions} />
      {charted.loading ? <Loading what="Loading metrics" /> : charted.error ? <ErrorBox error={charted.error} /> :
        (store.byRun.get(run.id)?.size ?? 0) === 0 ? (
          <Empty title={active ? "Waiting for the first metrics…" : "This run logged no metrics."}>
            {active ? "Charts appear as soon as the first step finishes." : null}
          </Empty>
        ) : (
          <MetricCharts store={charted} runs={chartRuns} options={options} charts={charts}
            onPointClick={(id, step) => navigate(`/runs/${id}/samples?step=${step}`)} />
        )}
      <p className="small muted">Click a point to open the samples of that step.</p>

      <div className="grid-2">
        <section className="card"><h2>Log</h2><LogTail state={logs} /></section>
        <section className="card"><h2>Config</h2><PlanView plan={planFact(run.facts)} /><ConfigView config={run.resolved_config} edited={run.config} /></section>
      </div>
      <WebhookPanel runId={run.id} experimentId={run.experiment_id} active={active} />
      <RunManage key={`${run.id}-${run.name}-${(run.tags ?? []).join(",")}-${run.notes?.length ?? 0}`} run={run} />
    </div>
  );
}

/** A run that has not started says why: its place in the queue, the run(s) holding the concurrency limit. */
function QueueNote({ runId }: { runId: number }) {
  const queue = useRunQueue(runId, true);
  if (queue.error) return <ErrorBox error={queue.error} />;
  const q = queue.data;
  if (!q?.waiting || !q.reason) return null;
  return (
    <p className="notice small" role="status" data-queue-position={q.position ?? ""}>
      <strong>{q.status === "queued" ? "Queued" : "Starting"}:</strong> {q.reason}
      {(q.in_flight ?? []).length > 0 && q.status === "queued" && <> {(q.in_flight ?? []).slice(0, 3).map((r, i) => (
        <span key={r.id}>{i ? ", " : "See "}<Link to={`/runs/${r.id}`}>run {r.id}</Link></span>))}.</>}
    </p>
  );
}
