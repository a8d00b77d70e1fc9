import type { RunStatus } from "../client/types.gen";
import type { Alarm } from "../lib/alarms";
import { Link } from "react-router-dom";
import { fmtNum } from "../lib/format";

export function StatusBadge({ status }: { status: RunStatus }) {
  return <span className={`badge status-${status}`} data-status={status}>{status === "running" && <span className="pulse" aria-hidden />}{status}</span>;
}

export function ScoreBadge({ score }: { score: number | null | undefined }) {
  if (score === null || score === undefined) return <span className="badge score-none">no score</span>;
  const cls = score >= 1 ? "score-good" : score > 0 ? "score-part" : "score-bad";
  return <span className={`badge ${cls}`} title="score">{fmtNum(score)}</span>;
}

export function Progress({ step, total, eta }: { step: number | null | undefined; total: number | null | undefined; eta?: number | null }) {
  if (!step && !total) return <span className="muted">—</span>;
  const pct = total ? Math.min(100, (100 * (step ?? 0)) / total) : 0;
  return (
    <div className="progress" title={total ? `${pct.toFixed(0)}%` : undefined}>
      <div className="progress-bar" role="progressbar" aria-valuenow={step ?? 0} aria-valuemin={0} aria-valuemax={total ?? undefined}>
        <div style={{ width: `${pct}%` }} />
      </div>
      <span className="progress-text">{step ?? 0}{total ? ` / ${total}` : ""}{eta ? ` · ETA ${fmtDuration(eta)}` : ""}</span>
    </div>
  );
}

export function fmtDuration(seconds: number): string {
  if (!Number.isFinite(seconds) || seconds < 0) return "—";
  if (seconds < 60) return `${Math.round(seconds)}s`;
  if (seconds < 3600) return `${Math.floor(seconds / 60)}m ${Math.round(seconds % 60)}s`;
  return `${Math.floor(seconds / 3600)}h ${Math.round((seconds % 3600) / 60)}m`;
}

/** Compact alarm badges (Runs table), each linking to the step it points at. */
export function AlarmBadges({ alarms, runId }: { alarms: Alarm[]; runId: number }) {
  if (!alarms.length) return <span className="badge ok" title="no health alarms">healthy</span>;
  return (
    <span className="alarm-badges">
      {alarms.map((a) => (
        <Link key={a.id} className={`badge alarm-${a.severity}`} title={a.detail}
          to={a.step !== null ? `/runs/${runId}/samples?step=${a.step}` : `/runs/${runId}`}>
          {a.title}
        </Link>
      ))}
    </span>
  );
}

/** The Run page banner. */
export function AlarmBanner({ alarms, runId }: { alarms: Alarm[]; runId: number }) {
  if (!alarms.length) return null;
  return (
    <div className="alarm-banner" role="alert">
      {alarms.map((a) => (
        <div key={a.id} className={`alarm alarm-${a.severity}`}>
          <strong>{a.title}</strong> <span>{a.detail}</span>{" "}
          {a.step !== null && <Link to={`/runs/${runId}/samples?step=${a.step}`}>samples of step {a.step} →</Link>}
        </div>
      ))}
    </div>
  );
}
