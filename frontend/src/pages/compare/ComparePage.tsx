/** Compare: overlay charts of the selected runs, the config keys that differ, final/best metrics. */
import { useMemo, useRef, useState } from "react";
import { Link, useSearchParams } from "react-router-dom";
import { useLiveMetrics } from "../../api/liveMetrics";
import { isActive, useRuns, useRunsById } from "../../api/queries";
import type { RunPublic } from "../../client/types.gen";
import { StatusBadge } from "../../components/Badges";
import { ChartControls, useChartOptions } from "../../components/ChartControls";
import { PageTitle } from "../../components/Layout";
import { MetricCharts } from "../../components/MetricCharts";
import { Empty, ErrorBox, Loading } from "../../components/States";
import { PALETTE } from "../../components/useTheme";
import { COMPARE_CHARTS } from "../../lib/charts";
import { diffConfigs, formatJson } from "../../lib/configDiff";
import { fmtNum } from "../../lib/format";
import { best, lastFinite } from "../../lib/series";
import { isAsyncConfig, loggedOffPolicy, withStaleness } from "../../lib/staleness";
import { URL_CONTROL } from "../../lib/urlControl";
import { COMPARE_QUERY, compareMaxPoints, compareMetricsRequest, compareRunIds } from "./prefetch";

/** Rows of the final/best table, in the order a reader looks: held-out score, training reward, KL, entropy, length,
 *  then the losses and speed; staleness (asynchronous runs only) last. `best`: which direction is better, null
 *  where neither is (`why` says so in the table). */
const SUMMARY: { match: RegExp; label: string; best: "max" | "min" | null; why?: string; offPolicyOnly?: boolean }[] = [
  { match: /^val-core\/.+\/(acc|reward)\/mean@\d+$/, label: "held-out score", best: "max" },
  { match: /^critic\/score\/mean$/, label: "training score", best: "max" },
  { match: /^critic\/rewards\/mean$/, label: "training reward", best: "max" },
  { match: /^actor\/(reward_kl_penalty|kl_loss)$/, label: "KL to the reference", best: null,
    why: "neither higher nor lower is better: a healthy KL stays in a range (about 0.01–0.1)" },
  { match: /^actor\/entropy$/, label: "entropy", best: null,
    why: "neither is better: entropy falls as the policy grows sure; a collapse to 0 is the alarm" },
  { match: /^response_length\/mean$/, label: "response length", best: null,
    why: "neither is better: the right length depends on the task" },
  { match: /^actor\/pg_loss$/, label: "actor loss", best: null,
    why: "neither is better: the policy-gradient loss is not a measure of progress (it centres on 0)" },
  { match: /^critic\/vf_loss$/, label: "critic loss", best: "min" },
  { match: /^perf\/throughput$/, label: "throughput", best: "max" },
  { match: /^training\/off_policy\/trajectory_staleness\/mean$/, label: "staleness", best: null, offPolicyOnly: true,
    why: "neither is better in itself: staleness is what asynchrony costs" },
];

/** The table's rows: known keys in SUMMARY's order (then by key); asynchronous-only rows only where a run is one. */
function summaryRows(keys: string[], offPolicy: boolean) {
  return keys.map((key) => ({ key, at: SUMMARY.findIndex((s) => s.match.test(key)) }))
    .filter(({ at }) => at !== -1 && (offPolicy || !SUMMARY[at].offPolicyOnly))
    .sort((a, b) => a.at - b.at || a.key.localeCompare(b.key))
    .map(({ key, at }) => ({ key, ...SUMMARY[at] }));
}

export function ComparePage() {
  const [params, setParams] = useSearchParams();
  const ids = useMemo(() => compareRunIds(params), [params]);
  const setIds = (next: number[]) => setParams((prev) => {
    const p = new URLSearchParams(prev);
    if (next.length) p.set("runs", next.join(","));
    else p.delete("runs");
    return p;
  }, URL_CONTROL);
  const [options, setOptions] = useChartOptions();
  const runQueries = useRunsById(ids);
  const runs = runQueries.map((q) => q.data).filter((r): r is RunPublic => !!r);
  const liveIds = runs.filter((r) => isActive(r.status)).map((r) => r.id);
  // one request for every chart, sent at once (the server expands the key patterns): no list of keys first;
  // about a point per pixel of a chart's width; wall times only for a time axis. The same request as the one
  // src/prefetchNow.ts sent before React booted (./prefetch.ts), which the query then takes.
  const [maxPoints] = useState(compareMaxPoints);
  const request = compareMetricsRequest(ids, maxPoints, options.xAxis);
  const store = useLiveMetrics(ids, request.keys, liveIds, maxPoints, undefined, COMPARE_QUERY.patterns, request.wallTimes);
  const wanted = useMemo(() => {
    const keys = new Set<string>();
    for (const run of store.byRun.values()) for (const k of run.keys()) keys.add(k);
    return [...keys];
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, [store.version, store.epoch]);
  // `runs` is a new array on every render (and the page renders on every chart update): diff again only when a
  // run's config object changed (~60 ms a load in a CPU profile, diffing the same configs again)
  const configs = runs.map((r) => r.resolved_config);
  const diffed = useRef<{ configs: unknown[]; rows: ReturnType<typeof diffConfigs> } | null>(null);
  if (!diffed.current || diffed.current.configs.length !== configs.length || diffed.current.configs.some((c, i) => c !== configs[i])) {
    diffed.current = { configs, rows: diffConfigs(configs) };
  }
  const configDiff = diffed.current.rows;
  const runRefs = runs.map((r) => ({ id: r.id, name: r.name || `run ${r.id}` }));
  // an async run among them (or one that trained off-policy): the staleness chart beside the others
  const offPolicy = runs.some((r) => isAsyncConfig(r.resolved_config as Record<string, unknown> | undefined))
    || [...store.byRun.values()].some((series) => loggedOffPolicy(series));
  const charts = useMemo(() => withStaleness(COMPARE_CHARTS, offPolicy), [offPolicy]);
  const summary = summaryRows(wanted, offPolicy);
  const loadError = runQueries.find((q) => q.error)?.error;

  return (
    <div className="stack">
      <PageTitle>Compare</PageTitle>
      <RunPicker selected={ids} onChange={setIds} />
      {ids.length === 0 ? <Empty title="Pick runs to compare.">Select runs above, or tick them in the <Link to="/">runs table</Link>.</Empty> :
        loadError ? <ErrorBox error={loadError} /> :
          runQueries.some((q) => q.isLoading) ? <Loading what="Loading runs" /> : (
            <>
              <div className="row">
                {runs.map((r, i) => (
                  <span key={r.id} className="badge" style={{ borderLeft: `4px solid ${PALETTE[i % PALETTE.length]}` }}>
                    <Link to={`/runs/${r.id}`}>{r.name || `run ${r.id}`}</Link> <StatusBadge status={r.status} />
                  </span>
                ))}
              </div>
              <ChartControls options={options} onChange={setOptions} />
              {store.loading ? <Loading what="Loading metrics" /> : store.error ? <ErrorBox error={store.error} /> :
                wanted.length === 0 ? <Empty title="These runs have no metrics yet." /> :
                  <MetricCharts store={store} runs={runRefs} options={options} charts={charts} />}

              <section className="card">
                <h2>Final and best metrics</h2>
                {summary.length === 0 ? <div className="muted">No metrics yet.</div> : (
                  <div className="table-wrap">
                    <table className="summary-table">
                      <thead><tr><th>Metric</th>{runs.map((r) => <th key={r.id} className="num" colSpan={2}>{r.name || `run ${r.id}`}</th>)}</tr>
                        <tr><th />{runs.map((r) => [<th key={`${r.id}f`} className="num">final</th>, <th key={`${r.id}b`} className="num">best</th>])}</tr></thead>
                      <tbody>
                        {summary.map(({ key, label, best: dir, why }) => {
                          return (
                            <tr key={key} data-key={key}>
                              <td><span>{label}</span> <span className="mono small muted">{key}</span>
                                {dir && <span className="small muted"> · {dir === "max" ? "higher" : "lower"} is better</span>}</td>
                              {runs.map((r) => {
                                const s = store.byRun.get(r.id)?.get(key);
                                const fin = lastFinite(s);
                                const b = dir ? best(s, dir) : null;
                                return [
                                  <td key={`${r.id}f`} className="num">{fmtNum(fin?.value ?? null)}</td>,
                                  dir ? <td key={`${r.id}b`} className="num" title={b ? `at step ${b.step}` : undefined}>{fmtNum(b?.value ?? null)}</td>
                                    : <td key={`${r.id}b`} className="num muted" title={why} data-no-best>n/a</td>,
                                ];
                              })}
                            </tr>
                          );
                        })}
                      </tbody>
                    </table>
                    <p className="small muted">best: the highest (or lowest) value a run reached, at the step its tooltip names; n/a
                      where neither direction is better (hover for why).</p>
                  </div>
                )}
              </section>

              <section className="card">
                <h2>Config differences</h2>
                {runs.length < 2 ? <div className="muted">Add another run to see what differs.</div> :
                  configDiff.length === 0 ? <div className="muted">The configs are identical.</div> : (
                    <div className="table-wrap">
                      <table className="diff-table">
                        <thead><tr><th>Key</th>{runs.map((r) => <th key={r.id}>{r.name || `run ${r.id}`}</th>)}</tr></thead>
                        <tbody>
                          {configDiff.map((row) => (
                            <tr key={row.key} data-key={row.key}>
                              <td>{row.key}</td>
                              {row.values.map((v, i) => <td key={i}>{formatJson(v)}</td>)}
                            </tr>
                          ))}
                        </tbody>
                      </table>
                      <div className="small muted" style={{ marginTop: ".4rem" }}>{configDiff.length} differing key{configDiff.length === 1 ? "" : "s"}; identical keys hidden.</div>
                    </div>
                  )}
              </section>
            </>
          )}
    </div>
  );
}

function RunPicker({ selected, onChange }: { selected: number[]; onChange: (ids: number[]) => void }) {
  const runs = useRuns({});
  if (runs.isLoading || !runs.data) return null;
  return (
    <details className="card">
      <summary>Runs ({selected.length} selected)</summary>
      <div className="row" style={{ marginTop: ".5rem" }}>
        {runs.data.data.map((r) => (
          <label key={r.id} className="badge">
            <input type="checkbox" checked={selected.includes(r.id)}
              onChange={(e) => onChange(e.target.checked ? [...selected, r.id] : selected.filter((x) => x !== r.id))} />
            {r.name || `run ${r.id}`}
          </label>
        ))}
      </div>
    </details>
  );
}
