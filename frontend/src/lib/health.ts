/**
 * Display helpers for the server's run health (api/health.ts): links, labels and numbers. No judging here:
 * which alarm fires, and when, is the server's call.
 */
import type { HealthAlarm, RunHealth } from "../api/health";
import { fmtNum } from "./format";

/** The Samples view at the alarm's step, with its filter. The filter is either Samples-page URL parameters
 *  ("max=0&source=gsm8k", as the page writes them) or, without an "=", text to search the answers for. */
export function samplesHref(runId: number, samples: NonNullable<HealthAlarm["samples"]>): string {
  const params = new URLSearchParams({ step: String(samples.step) });
  const filter = samples.filter?.trim();
  if (filter) {
    if (filter.includes("=")) {
      for (const [k, v] of new URLSearchParams(filter.replace(/^\?/, ""))) if (k !== "step") params.set(k, v);
    } else params.set("q", filter);
  }
  return `/runs/${runId}/samples?${params}`;
}

/** "kl=0.153, kl_high=0.1": the numbers behind an alarm, each to a few significant digits, in the server's order. */
export function fmtValues(values: Record<string, number> | null | undefined): string {
  return Object.entries(values ?? {}).map(([k, v]) => `${k} = ${fmtNum(v, 3)}`).join(", ");
}

/** Firing first (errors before warnings), then cleared, newest first within each. */
export function splitAlarms(health: RunHealth | null | undefined): { firing: HealthAlarm[]; cleared: HealthAlarm[] } {
  const alarms = health?.alarms ?? [];
  const rank = (a: HealthAlarm) => (a.severity === "error" ? 0 : 1);
  const firing = alarms.filter((a) => a.state === "firing").sort((a, b) => rank(a) - rank(b) || b.since_step - a.since_step);
  const cleared = alarms.filter((a) => a.state === "cleared")
    .sort((a, b) => (b.cleared_step ?? b.since_step) - (a.cleared_step ?? a.since_step));
  return { firing, cleared };
}

/** A firing alarm's id as a short badge label (the runs list carries ids only; the run page has the titles):
 *  "kl-high" -> "kl high", "skipped:actor" -> "skipped (actor)". */
export function alarmLabel(id: string): string {
  const [kind, ...rest] = id.split(":");
  const words = kind.replace(/[-_]+/g, " ").trim();
  return rest.length ? `${words} (${rest.join(":")})` : words;
}
