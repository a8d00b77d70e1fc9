/** What the engine reported about a run when it started (RunPublic.facts), as the run page words it. */

/** A parameter count in short: 950, 12.3K, 494M, 7.62B. */
export function fmtCount(n: number): string {
  const a = Math.abs(n);
  for (const [size, unit] of [[1e12, "T"], [1e9, "B"], [1e6, "M"], [1e3, "K"]] as const) {
    if (a >= size) return `${Number((n / size).toPrecision(3))}${unit}`;
  }
  return String(n);
}

function count(v: unknown): number | null {
  return typeof v === "number" && Number.isFinite(v) && v >= 0 ? v : null;
}

export interface ParameterFact {
  /** what the page shows, e.g. "4.4M trainable / 498M parameters (0.88%)" or "494M parameters, all trainable" */
  text: string;
  /** the exact counts, for a tooltip */
  title: string;
  /** fewer parameters train than the model has (LoRA) */
  partial: boolean;
}

/** A role's trainable vs total parameters: the actor's (`n_trainable_params`, `n_params`) or, with role "critic", the
 * critic's (`critic_n_trainable_params`, `critic_n_params`); null when the run reported neither. */
export function parameterFact(facts: Record<string, unknown> | null | undefined, role: "actor" | "critic" = "actor"): ParameterFact | null {
  const prefix = role === "critic" ? "critic_" : "";
  const total = count(facts?.[`${prefix}n_params`]);
  const trainable = count(facts?.[`${prefix}n_trainable_params`]);
  if (total === null) return trainable === null ? null : { text: `${fmtCount(trainable)} trainable parameters`, title: `${trainable.toLocaleString("en-US")} trainable`, partial: false };
  const exact = `${(trainable ?? total).toLocaleString("en-US")} trainable of ${total.toLocaleString("en-US")}`;
  if (trainable === null) return { text: `${fmtCount(total)} parameters`, title: `${total.toLocaleString("en-US")} parameters`, partial: false };
  if (trainable >= total) return { text: `${fmtCount(total)} parameters, all trainable`, title: `${exact} (full fine-tuning)`, partial: false };
  const share = total > 0 ? (100 * trainable) / total : 0;
  const pct = share === 0 ? "0" : share < 0.01 ? "<0.01" : String(Number(share.toPrecision(2)));
  return { text: `${fmtCount(trainable)} trainable / ${fmtCount(total)} parameters (${pct}%)`, title: exact, partial: true };
}

/** Where the run trains: "NVIDIA H100 80GB HBM3 × 2", "cpu"; null when not reported. */
export function deviceFact(facts: Record<string, unknown> | null | undefined): string | null {
  const name = typeof facts?.device_name === "string" && facts.device_name ? facts.device_name
    : typeof facts?.device === "string" && facts.device ? facts.device : null;
  if (name === null) return null;
  const workers = count(facts?.workers);
  return workers !== null && workers > 1 ? `${name} × ${workers}` : name;
}

/** One key the job decided at its start (engine/config/plan.py), beside the resolved config it never rewrites. */
export interface PlanEntry {
  key: string;
  value: unknown;
  was: unknown;
  why: string;
  by: string;
}

/** The run's plan (`facts.plan`): the keys the driver and its workers set from the machine they run on; [] when
 * none was reported (an engine before the plan, a run not started yet). */
export function planFact(facts: Record<string, unknown> | null | undefined): PlanEntry[] {
  const plan = facts?.plan;
  if (!Array.isArray(plan)) return [];
  return plan.filter((e): e is PlanEntry => typeof e === "object" && e !== null && typeof (e as PlanEntry).key === "string")
    .map((e) => ({ key: e.key, value: e.value, was: e.was, why: typeof e.why === "string" ? e.why : "", by: typeof e.by === "string" ? e.by : "" }));
}
