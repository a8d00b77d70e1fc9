/**
 * The dense table: one row an answer (prompt id, answer, score, advantage, length, question, first line), sortable by
 * clicking a column, filterable, virtualised (only the rows in view are in the DOM), so a step of 4,096
 * answers scrolls as smoothly as one of 16. A row opens that prompt's group.
 */
import { useMemo, useState } from "react";
import type { SampleRow } from "../../client/types.gen";
import { fmtNum } from "../../lib/format";
import { filterRows, sortRows, visibleWindow, type Sort, type SortColumn } from "../../lib/sampleTable";
import { offPolicyRows, stalenessLabel, versionLabel } from "../../lib/staleness";

const ROW = 28;
const VIEWPORT = 560;

const COLUMNS: { id: SortColumn | "answer" | "question" | "first"; label: string; title?: string }[] = [
  { id: "prompt", label: "prompt", title: "which of the step's prompts it answers (#3: the step's 4th prompt; its answers form a group)" },
  { id: "answer", label: "answer", title: "the answer's position among the step's answers, from 0 (sample_index)" },
  { id: "score", label: "score" },
  { id: "advantage", label: "advantage", title: "mean over the answer's tokens" },
  { id: "length", label: "length", title: "response tokens" },
  { id: "question", label: "question", title: "the prompt's last user turn, without the chat template" },
  { id: "first", label: "answer (first line)" },
];
const TURNS_COLUMN = { id: "turns" as const, label: "turns", title: "conversation turns (the prompt, model turns, tool answers); ✗: a tool call failed" };
const VERSION_COLUMN = { id: "version" as const, label: "version", title: "policy version(s) that wrote the answer · versions its newest token lags the trained weights" };
const MISMATCH_COLUMN = { id: "mismatch" as const, label: "max |Δ rollout|", title: "largest |rollout − actor log-prob| over the answer's tokens" };

export function SampleTable({ rows, sort, onSort, filter, onFilter, onOpen, total }: {
  rows: SampleRow[];
  sort: Sort;
  onSort: (s: Sort) => void;
  filter: string;
  onFilter: (text: string) => void;
  onOpen: (row: SampleRow) => void;
  total: number;
}) {
  const shown = useMemo(() => sortRows(filterRows(rows, filter), sort), [rows, filter, sort]);
  // the rollout/actor gap column only for runs that logged rollout log-probs (a separate rollout engine)
  const gap = useMemo(() => rows.some((r) => r.rollout_diff_max !== null && r.rollout_diff_max !== undefined), [rows]);
  // multi-turn runs: the turns column (count, ✗ when a tool call failed)
  const turns = useMemo(() => rows.some((r) => r.num_turns !== null && r.num_turns !== undefined), [rows]);
  // asynchronous runs that trained off-policy: each answer's versions and staleness
  const versions = useMemo(() => offPolicyRows(rows), [rows]);
  const columns = [...COLUMNS.slice(0, 5), ...(gap ? [MISMATCH_COLUMN] : []), ...(turns ? [TURNS_COLUMN] : []),
    ...(versions ? [VERSION_COLUMN] : []), ...COLUMNS.slice(5)];
  const grid = { gridTemplateColumns: `70px 62px 70px 90px 60px ${gap ? "110px " : ""}${turns ? "70px " : ""}${versions ? "110px " : ""}minmax(0, 1fr) minmax(0, 1fr)` };
  const [scrollTop, setScrollTop] = useState(0);
  const [start, end] = visibleWindow(scrollTop, VIEWPORT, ROW, shown.length);
  const header = (c: { id: string; label: string; title?: string }) => {
    const sortable = ["prompt", "score", "advantage", "length", "mismatch", "turns"].includes(c.id);
    const active = sortable && sort.column === c.id;
    return (
      <div key={c.id} role="columnheader" className={`st-cell st-${c.id}`} title={c.title}
        aria-sort={active ? (sort.desc ? "descending" : "ascending") : sortable ? "none" : undefined}>
        {sortable ? (
          <button type="button" className="link-like" onClick={() => onSort({ column: c.id as SortColumn, desc: active ? !sort.desc : c.id !== "prompt" })}>
            {c.label}{active ? (sort.desc ? " ▼" : " ▲") : ""}
          </button>
        ) : c.label}
      </div>
    );
  };
  return (
    <div className="card sample-table-card">
      <div className="row small" style={{ marginBottom: ".4rem" }}>
        <input type="search" aria-label="filter table" placeholder="#prompt, or text in the question or first line" value={filter}
          onChange={(e) => onFilter(e.target.value)} style={{ width: 300 }} />
        <span className="muted" data-table-count={shown.length}>
          {shown.length === rows.length ? `${rows.length} answers` : `${shown.length} of ${rows.length} answers`}
          {total > rows.length && ` (the first ${rows.length} of ${total})`} · click a column to sort, a row to open its group
        </span>
      </div>
      <p className="small muted st-legend" data-table-legend>
        <strong>prompt</strong> #n: the step's prompt it answers, from 0 (its answers are a group) ·{" "}
        <strong>answer</strong>: its position among the step's answers, from 0 · <strong>length</strong>: response tokens
      </p>
      <div role="table" aria-label="answers" aria-rowcount={shown.length + 1} className="sample-table">
        <div role="rowgroup"><div role="row" className="st-row st-head" style={grid}>{columns.map(header)}</div></div>
        <div role="rowgroup" className="st-body" style={{ height: Math.min(VIEWPORT, Math.max(ROW, shown.length * ROW)) }}
          onScroll={(e) => setScrollTop(e.currentTarget.scrollTop)} tabIndex={0} aria-label="answers, scrollable">
          <div style={{ height: shown.length * ROW, position: "relative" }}>
            {shown.slice(start, end).map((r, k) => (
              <div key={r.id} role="row" aria-rowindex={start + k + 2} className="st-row" data-sample-id={r.id} tabIndex={-1}
                style={{ ...grid, position: "absolute", top: (start + k) * ROW, height: ROW, left: 0, right: 0 }}
                onClick={() => onOpen(r)} onKeyDown={(e) => { if (e.key === "Enter") onOpen(r); }}>
                <div role="cell" className="st-cell st-prompt">#{r.prompt_index ?? "—"}</div>
                <div role="cell" className="st-cell st-answer">{r.sample_index}</div>
                <div role="cell" className={`st-cell st-score num ${r.score === null || r.score === undefined ? "" : r.score > 0 ? "good" : "bad"}`}>{fmtNum(r.score ?? null, 3)}</div>
                <div role="cell" className="st-cell st-advantage num">{fmtNum(r.advantage ?? null, 3)}</div>
                <div role="cell" className="st-cell st-length num">{r.length}</div>
                {gap && <div role="cell" className="st-cell st-mismatch num">{fmtNum(r.rollout_diff_max ?? null, 3)}</div>}
                {turns && <div role="cell" className={`st-cell st-turns num ${r.tool_error ? "bad" : ""}`} title={r.tools?.length ? `tools: ${r.tools.join(", ")}` : "no tool call"}>
                  {r.num_turns ?? "—"}{r.tool_error ? " ✗" : ""}</div>}
                {versions && <div role="cell" className={`st-cell st-version num ${(r.staleness ?? 0) > 0 ? "bad" : ""}`}
                  title={stalenessLabel(r) ?? "no versions recorded"}>
                  {versionLabel(r) ?? "—"}{r.staleness != null ? ` · ${r.staleness}` : ""}</div>}
                <div role="cell" className="st-cell st-question" title={r.question}>{r.question || <span className="muted">—</span>}</div>
                <div role="cell" className="st-cell st-first mono" title={r.first_line}>{r.first_line || <span className="muted">(empty)</span>}</div>
              </div>
            ))}
          </div>
        </div>
      </div>
    </div>
  );
}
