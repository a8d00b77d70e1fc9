/** What the job decided at its start (the run's plan: engine/config/plan.py), shown beside the resolved config,
 * which the job runs as it is: "auto: actor_rollout_ref.actor.use_dynamic_bsz = true, because …". */
import { formatJson, type Json } from "../../lib/configDiff";
import type { PlanEntry } from "../../lib/runFacts";

export function PlanView({ plan }: { plan: PlanEntry[] }) {
  if (plan.length === 0) return null;
  return (
    <div data-plan>
      <h3>Decided at the start</h3>
      <p className="small muted">The job runs the config below as it is; these are the values its driver and workers chose from the machine (device, memory, local paths).</p>
      <ul className="small">
        {plan.map((e, i) => (
          <li key={`${e.by}-${e.key}-${i}`} data-plan-key={e.key}>
            auto ({e.by || "job"}): <span className="mono">{e.key}</span> = <strong className="mono">{formatJson(e.value as Json)}</strong>
            {e.was !== undefined && e.was !== null && <span className="muted"> (was {formatJson(e.was as Json)})</span>}
            {e.why && <>, because {e.why}</>}
          </li>
        ))}
      </ul>
    </div>
  );
}
