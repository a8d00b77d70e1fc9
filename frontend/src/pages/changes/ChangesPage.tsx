/**
 * What changed: two validation steps (of this run, or B of another run on the same validation set) compared
 * prompt by prompt: counts of newly solved, newly failed, solved by both, by neither; the lists, each row
 * opening side by side; sorting by most improved; and a strip per prompt over all of the run's validations.
 * Multi-turn runs: each answer says whether it called a tool (and whether a call failed).
 */
import { useMemo } from "react";
import { Link, useParams, useSearchParams } from "react-router-dom";
import { useRun, useRuns, useSampleRows, useSampleSteps } from "../../api/queries";
import { PageTitle } from "../../components/Layout";
import { LongText } from "../../components/LongText";
import { Empty, QueryState } from "../../components/States";
import { compare, resultsAt, sortChanges, strips, type ChangeKind, type ChangeSort, type PromptResult } from "../../lib/changes";
import { fmtNum } from "../../lib/format";
import { URL_CONTROL } from "../../lib/urlControl";

const KINDS: { id: ChangeKind; label: string; className: string }[] = [
  { id: "newly-solved", label: "newly solved", className: "good" },
  { id: "newly-failed", label: "newly failed", className: "bad" },
  { id: "both", label: "solved by both", className: "" },
  { id: "neither", label: "solved by neither", className: "" },
];
const STRIP_ROWS = 200;

export function ChangesPage() {
  const runId = Number(useParams().runId);
  const [params, setParams] = useSearchParams();
  const run = useRun(runId);
  const runs = useRuns({});
  const otherId = params.get("brun") ? Number(params.get("brun")) : runId;
  const stepsA = useSampleSteps(runId);
  const stepsB = useSampleSteps(otherId);
  const valA = useMemo(() => (stepsA.data?.data ?? []).filter((s) => s.split === "val").map((s) => s.step), [stepsA.data]);
  const valB = useMemo(() => (stepsB.data?.data ?? []).filter((s) => s.split === "val").map((s) => s.step), [stepsB.data]);
  const num = (k: string) => (params.get(k) !== null && params.get(k) !== "" && Number.isFinite(Number(params.get(k))) ? Number(params.get(k)) : null);
  // default: the first validation against the last one (of B's run when comparing two runs)
  const stepA = num("a") ?? valA[0] ?? null;
  const stepB = num("b") ?? (otherId === runId ? valA[valA.length - 1] : valB[valB.length - 1]) ?? null;
  const threshold = num("th") ?? 0.5;
  const show = (params.get("show") ?? "newly-solved") as ChangeKind;
  const sort = (["improved", "regressed", "prompt"].includes(params.get("sort") ?? "") ? params.get("sort") : "improved") as ChangeSort;
  const rowsA = useSampleRows(runId, { split: "val", limit: 50_000 }, valA.length > 0);
  const rowsB = useSampleRows(otherId, { split: "val", step: stepB !== null ? [stepB] : [], limit: 50_000 }, otherId !== runId && stepB !== null);

  const set = (patch: Record<string, string | null>) => setParams((prev) => {
    const next = new URLSearchParams(prev);
    for (const [k, v] of Object.entries(patch)) {
      if (v === null || v === "") next.delete(k);
      else next.set(k, v);
    }
    return next;
  }, URL_CONTROL);

  const result = useMemo(() => {
    if (!rowsA.data || stepA === null || stepB === null) return null;
    const bRows = otherId === runId ? rowsA.data.data : rowsB.data?.data;
    if (!bRows) return null;
    return compare(resultsAt(rowsA.data.data, stepA, threshold), resultsAt(bRows, stepB, threshold));
  }, [rowsA.data, rowsB.data, stepA, stepB, threshold, otherId, runId]);
  const stripList = useMemo(() => (rowsA.data ? strips(rowsA.data.data, valA, threshold) : []), [rowsA.data, valA, threshold]);
  const flipping = stripList.filter((s) => s.flips > 0);
  const questions = useMemo(() => new Map((rowsA.data?.data ?? []).map((r) => [r.prompt_index ?? null, r.question])), [rowsA.data]);
  const runName = (id: number) => runs.data?.data.find((r) => r.id === id)?.name || `run ${id}`;
  // side by side opens at the prompt: both validations answered it
  const sbs = (prompt: number) => `/side-by-side?a=${runId}:${stepA}&b=${otherId}:${stepB}&split=val&prompt=${prompt}`;

  return (
    <div className="stack">
      <PageTitle actions={<><Link className="button" to={`/runs/${runId}/samples?split=val`}>Samples</Link><Link className="button" to={`/runs/${runId}`}>Charts</Link></>}>
        What changed · <Link to={`/runs/${runId}`}>{run.data?.name || `run ${runId}`}</Link>
      </PageTitle>
      <QueryState query={stepsA} what="Loading validations" empty={() => valA.length === 0 ? (
        <Empty title="This run has no validation samples yet.">Validations run every trainer.test_freq steps (and before training with trainer.val_before_train).</Empty>) : null}>
        {() => (
          <>
            <div className="card row" role="group" aria-label="validations to compare">
              <label>from validation <select aria-label="step A" value={stepA ?? ""} onChange={(e) => set({ a: e.target.value })}>
                {valA.map((s) => <option key={s} value={s}>step {s}</option>)}
              </select></label>
              <label>to <select aria-label="run B" value={otherId} onChange={(e) => set({ brun: Number(e.target.value) === runId ? null : e.target.value, b: null })}>
                {(runs.data?.data ?? [{ id: runId, name: run.data?.name ?? "" }]).map((r) => <option key={r.id} value={r.id}>{r.id === runId ? "this run" : r.name || `run ${r.id}`}</option>)}
              </select></label>
              <label>validation <select aria-label="step B" value={stepB ?? ""} onChange={(e) => set({ b: e.target.value })}>
                {(otherId === runId ? valA : valB).map((s) => <option key={s} value={s}>step {s}</option>)}
              </select></label>
              <label title="a prompt is solved when the mean score of its answers reaches this">solved when score ≥{" "}
                <input type="number" step="any" aria-label="solved threshold" style={{ width: 70 }} defaultValue={threshold} onChange={(e) => set({ th: e.target.value })} /></label>
            </div>

            {!result ? <QueryState query={otherId === runId ? rowsA : rowsB} what="Loading answers">{() => null}</QueryState> : (
              <>
                <div className="change-counts" role="group" aria-label="counts">
                  {KINDS.map((k) => (
                    <button key={k.id} type="button" className={`card change-count ${k.className}`} aria-pressed={show === k.id} data-kind={k.id}
                      onClick={() => set({ show: k.id })}>
                      <span className="change-number" data-count={result.counts[k.id]}>{result.counts[k.id]}</span>
                      <span className="small">{k.label}</span>
                    </button>
                  ))}
                </div>
                <p className="small muted">{result.changes.length} prompts asked at both validations
                  {result.onlyOne > 0 && ` · ${result.onlyOne} asked at only one (not counted)`} · {otherId === runId ? `step ${stepA} → step ${stepB}` : `${runName(runId)} step ${stepA} → ${runName(otherId)} step ${stepB}`}</p>
                {result.changes.length === 0 && otherId !== runId && <p className="notice warn small">The two runs' validations share no prompt: pick a run validated on the same set.</p>}

                <section className="card">
                  <div className="row">
                    <h2 style={{ margin: 0 }}>{KINDS.find((k) => k.id === show)?.label}</h2>
                    <label className="small">sort by <select aria-label="sort changes" value={sort} onChange={(e) => set({ sort: e.target.value })}>
                      <option value="improved">most improved</option>
                      <option value="regressed">most regressed</option>
                      <option value="prompt">prompt id</option>
                    </select></label>
                  </div>
                  <ChangeList changes={sortChanges(result.changes.filter((c) => c.kind === show), sort)} link={sbs} />
                </section>
              </>
            )}

            <section className="card">
              <h2>Every validation, prompt by prompt</h2>
              <p className="small muted">{flipping.length} of {stripList.length} prompts changed between solved and failed at least once over {valA.length} validations
                (steps {valA.join(", ")}); the ones that flip most come first. ■ solved · □ failed · · not asked</p>
              {flipping.length === 0 ? <p className="small">No prompt changed its outcome.</p> : (
                <table className="strip-table small" aria-label="prompt strips">
                  <thead><tr><th>prompt</th><th>question</th><th>flips</th><th>validations, step {valA[0]} → {valA[valA.length - 1]}</th></tr></thead>
                  <tbody>
                    {flipping.slice(0, STRIP_ROWS).map((s) => (
                      <tr key={s.prompt} data-strip={s.prompt}>
                        <td>#{s.prompt}</td>
                        <td className="change-question"><LongText text={questions.get(s.prompt)} /></td>
                        <td className="num">{s.flips}</td>
                        <td data-marks={s.marks.map((m) => (m === null ? "." : m ? "1" : "0")).join("")}>
                          {s.marks.map((m, i) => <span key={i} className={`strip-cell ${m === null ? "strip-none" : m ? "strip-solved" : "strip-failed"}`}
                            title={`step ${valA[i]}: ${m === null ? "not asked" : m ? "solved" : "failed"}`} />)}
                        </td>
                      </tr>
                    ))}
                  </tbody>
                </table>
              )}
              {flipping.length > STRIP_ROWS && <p className="small muted">The first {STRIP_ROWS} of {flipping.length}.</p>}
            </section>
          </>
        )}
      </QueryState>
    </div>
  );
}

/** Multi-turn runs: whether the prompt's answers called a tool (✗: a call failed). */
function ToolTag({ r }: { r: PromptResult }) {
  if (!r.tool) return null;
  const { answers, used, errors } = r.tool;
  const text = used === 0 ? "no tool" : answers === 1 ? "tool" : `tool ${used}/${answers}`;
  return <span className={`badge ${errors ? "alarm-warning" : "neutral"}`} data-tool-tag={text + (errors ? " ✗" : "")}
    title={`${used} of ${answers} answers called a tool; ${errors} had a tool call fail`} style={{ marginLeft: ".4rem" }}>{text}{errors ? " ✗" : ""}</span>;
}

function ChangeList({ changes, link }: { changes: ReturnType<typeof sortChanges>; link: (prompt: number) => string }) {
  if (!changes.length) return <p className="small muted">None.</p>;
  return (
    <div className="table-wrap">
      <table className="change-list">
        <thead><tr><th>prompt</th><th>question</th><th className="num">score A</th><th className="num">score B</th><th className="num">Δ</th><th>answer A</th><th>answer B</th><th /></tr></thead>
        <tbody>
          {changes.slice(0, 500).map((c) => (
            <tr key={c.prompt} data-prompt={c.prompt}>
              <td>#{c.prompt}</td>
              <td className="small change-question" data-question><LongText text={c.b.question || c.a.question} /></td>
              <td className="num">{fmtNum(c.a.score, 3)}</td>
              <td className="num">{fmtNum(c.b.score, 3)}</td>
              <td className="num" data-delta>{c.delta > 0 ? "+" : ""}{fmtNum(c.delta, 3)}</td>
              <td className="mono small change-answer" data-answer="a"><LongText text={c.a.answer} /><ToolTag r={c.a} /></td>
              <td className="mono small change-answer" data-answer="b"><LongText text={c.b.answer} /><ToolTag r={c.b} /></td>
              <td><Link to={link(c.prompt)}>side by side →</Link></td>
            </tr>
          ))}
        </tbody>
      </table>
      {changes.length > 500 && <p className="small muted">The first 500 of {changes.length}.</p>}
    </div>
  );
}
