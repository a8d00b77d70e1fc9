import type { RunStatus } from "../client/types.gen";
import type { RunHealthSummary } from "../api/health";
import { Link } from "react-router-dom";
import { fmtNum } from "../lib/format";
import { alarmLabel } from "../lib/health";

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

/** The Runs table's health cell, from the server's summary (`health` on each runs-list item): "healthy", or
 *  one badge per firing alarm, each leading to the run page, whose banner has the title, numbers and samples. */
export function HealthBadges({ health, runId }: { health: RunHealthSummary | null; runId: number }) {
  if (!health) return <span className="muted" title="no health summary for this run">—</span>;
  if (!health.firing.length) {
    return <span className="badge ok" data-health={health.status} title="no health alarm firing">healthy</span>;
  }
  // the summary has ids only: each badge takes the run's overall severity
  const severity = health.status === "error" ? "error" : "warning";
  return (
    <span className="alarm-badges" data-health={health.status}>
      {health.firing.map((id) => (
        <Link key={id} className={`badge alarm-${severity}`} data-alarm-id={id} title={`${id}: see the run page`}
          to={`/runs/${runId}#health`}>
          {alarmLabel(id)}
        </Link>
      ))}
    </span>
  );
}
