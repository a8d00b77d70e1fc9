/** The run page's health: the server's judgement (api/health.ts) as a banner of firing alarms, each with its
 *  numbers and a link to the answers that show it; the step-one checks the setup failed (closed, but a fact about
 *  the run: kept in view); and the cleared ones listed quietly under it. */
import { useEffect } from "react";
import { Link, useLocation } from "react-router-dom";
import type { HealthAlarm, RunHealth } from "../../api/health";
import { fmtValues, samplesHref, splitAlarms } from "../../lib/health";

export function HealthPanel({ health, runId }: { health: RunHealth | undefined; runId: number }) {
  // the Runs table's badges link to #health: the router does not scroll to a hash by itself
  const { hash } = useLocation();
  const loaded = !!health;
  useEffect(() => {
    if (loaded && hash === "#health") document.getElementById("health")?.scrollIntoView({ block: "start" });
  }, [loaded, hash]);
  if (!health) return null; // still loading
  const { firing, findings, cleared } = splitAlarms(health);
  return (
    <section id="health" className="health" aria-label="run health" data-health-status={health.status}
      data-checked-step={health.checked_step ?? ""}>
      {firing.length > 0 ? (
        <div className="alarm-banner" role="alert">
          {firing.map((a) => <FiringAlarm key={a.id} alarm={a} runId={runId} />)}
        </div>
      ) : health.checked_step == null ? (
        // nothing judged yet (a queued run, or one still at its first step): "no alarm" would claim a check
        <p className="small muted health-unjudged" data-judged="no">Health not judged yet: it is judged from the first step's metrics on.</p>
      ) : (
        <p className="small muted health-ok" data-judged="yes">No health alarm (judged up to step {health.checked_step}).</p>
      )}
      {findings.map((a) => (
        <div key={a.id} className="alarm alarm-warning health-finding small" role="note" data-alarm-id={a.id}
          data-state="finding" data-since-step={a.since_step}>
          <strong>Setup check failed at step {a.since_step}: {a.title}</strong>{" "}
          <span>{a.detail}</span>
          {Object.keys(a.values ?? {}).length > 0 && <div className="alarm-values mono small">{fmtValues(a.values)}</div>}
        </div>
      ))}
      {cleared.length > 0 && (
        <details className="health-cleared small muted">
          <summary>{cleared.length} cleared alarm{cleared.length === 1 ? "" : "s"}</summary>
          <ul>
            {cleared.map((a) => (
              <li key={a.id} data-alarm-id={a.id} data-state="cleared" title={a.detail}>
                {a.title}: steps {a.since_step}–{a.cleared_step ?? "?"}
                {Object.keys(a.values ?? {}).length > 0 && <span className="mono"> ({fmtValues(a.values)})</span>}
                {" · "}<Link to={samplesHref(runId, samplesOf(a))}>samples of step {samplesOf(a).step}</Link>
              </li>
            ))}
          </ul>
        </details>
      )}
    </section>
  );
}

function FiringAlarm({ alarm: a, runId }: { alarm: HealthAlarm; runId: number }) {
  const values = fmtValues(a.values);
  return (
    <div className={`alarm alarm-${a.severity}`} data-alarm-id={a.id} data-state="firing" data-since-step={a.since_step}>
      <strong>{a.title}</strong> <em className="alarm-since">since step {a.since_step}</em>{" "}
      <span>{a.detail}</span>
      {values && <div className="alarm-values mono small">{values}</div>}
      <Link to={samplesHref(runId, samplesOf(a))}>samples of step {samplesOf(a).step} →</Link>
    </div>
  );
}

/** The answers that show it: the server's pick, else its first step's (a metric alarm without a pick). */
function samplesOf(a: HealthAlarm): NonNullable<HealthAlarm["samples"]> {
  return a.samples ?? { step: a.since_step, filter: null };
}
