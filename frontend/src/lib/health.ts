/**
 * Display helpers for the server's run health (api/health.ts): links, labels and numbers. No judging here:
 * which alarm fires, and when, is the server's call.
 */
import type { HealthAlarm, RunHealth } from "../api/health";
import { fmtNum } from "./format";

/** The samples API's query names (what the server's filter speaks) as the Samples page's URL parameters. */
const PAGE_PARAM: Record<string, (v: string) => Record<string, string>> = {
  min_score: (v) => ({ min: v }),
  max_score: (v) => ({ max: v }),
  data_source: (v) => ({ source: v }),
  prompt_index: (v) => ({ prompt: v }),
  num_turns: (v) => ({ turns: v }),
  uses_tool: (v) => ({ tool: v === "true" ? "*" : "-" }),
  tool_error: (v) => ({ tool_error: v === "true" ? "1" : "0" }),
  // the list view keeps prompt order; the table sorts
  order: (v) => ({ view: "table", sort: v.replace(/_index$/, "") }),
};

/** The Samples view at the alarm's step, with its filter: samples-API query parameters ("uses_tool=false",
 *  "order=-score"), turned into the page's own; a filter without "=" is text to search the answers for. */
export function samplesHref(runId: number, samples: NonNullable<HealthAlarm["samples"]>): string {
  const params = new URLSearchParams({ step: String(samples.step) });
  const filter = samples.filter?.trim();
  if (filter && filter.includes("=")) {
    for (const [k, v] of new URLSearchParams(filter.replace(/^\?/, ""))) {
      if (k === "step") continue; // the alarm's step is the one to show
      for (const [pk, pv] of Object.entries(PAGE_PARAM[k]?.(v) ?? { [k]: v })) params.set(pk, pv);
    }
  } else if (filter) params.set("q", filter);
  return `/runs/${runId}/samples?${params}`;
}

/** "kl=0.153, kl_high=0.1": the numbers behind an alarm, each to a few significant digits, in the server's order. */
export function fmtValues(values: Record<string, number> | null | undefined): string {
  return Object.entries(values ?? {}).map(([k, v]) => `${k} = ${fmtNum(v, 3)}`).join(", ");
}

/** The server's step-one checks (backend/services/health/invariant_checks.py): findings about the run's setup. Once
 *  closed they are not "gone": the setup failed them, so the run page keeps them in view. */
export function isSetupFinding(a: HealthAlarm): boolean {
  return a.id.startsWith("step1-");
}

/** Firing first (errors before warnings); closed step-one findings apart; then cleared, newest first within each. */
export function splitAlarms(health: RunHealth | null | undefined): { firing: HealthAlarm[]; findings: HealthAlarm[]; cleared: HealthAlarm[] } {
  const alarms = health?.alarms ?? [];
  const rank = (a: HealthAlarm) => (a.severity === "error" ? 0 : 1);
  const firing = alarms.filter((a) => a.state === "firing").sort((a, b) => rank(a) - rank(b) || b.since_step - a.since_step);
  const closed = alarms.filter((a) => a.state === "cleared")
    .sort((a, b) => (b.cleared_step ?? b.since_step) - (a.cleared_step ?? a.since_step));
  return { firing, findings: closed.filter(isSetupFinding), cleared: closed.filter((a) => !isSetupFinding(a)) };
}

/** A firing alarm's id as a short badge label (the runs list carries ids only; the run page has the titles):
 *  "kl-high" -> "kl high", "skipped:actor" -> "skipped (actor)". */
export function alarmLabel(id: string): string {
  const [kind, ...rest] = id.split(":");
  const words = kind.replace(/[-_]+/g, " ").trim();
  return rest.length ? `${words} (${rest.join(":")})` : words;
}
