/** Subscribing from the run page: a webhook for this run or for every run of its experiment, Slack-compatible or
 *  plain JSON, with an optional bearer token and the events to send. The server checks the address and names the
 *  field it refuses; what was typed stays in the form so that it can be fixed. */
import { useState } from "react";
import { useMutation, useQueryClient } from "@tanstack/react-query";
import * as sdk from "../../client/sdk.gen";
import type { WebhookCreate } from "../../client/types.gen";
import { ApiError, unwrap } from "../../api/client";

type WebhookEventName = NonNullable<WebhookCreate["events"]>[number];

export const WEBHOOK_EVENTS: { event: WebhookEventName; label: string }[] = [
  { event: "alarm.fired", label: "an alarm raised" },
  { event: "alarm.cleared", label: "an alarm cleared" },
  { event: "run.succeeded", label: "succeeded" },
  { event: "run.failed", label: "failed" },
  { event: "run.cancelled", label: "cancelled" },
  { event: "run.stalled", label: "stalled" },
];

type Scope = "run" | "experiment";

/** The refusal's message per form field (the last part of each error's `loc`), the rest under "". */
function byField(error: unknown): Record<string, string> {
  if (!(error instanceof ApiError)) return error ? { "": String((error as Error).message ?? error) } : {};
  if (!error.fieldErrors.length) return { "": error.message };
  const out: Record<string, string> = {};
  for (const e of error.fieldErrors) {
    const field = String(e.loc?.[e.loc.length - 1] ?? "");
    const key = ["url", "token", "format", "events", "name"].includes(field) ? field : "";
    out[key] = out[key] ? `${out[key]}; ${e.msg}` : e.msg;
  }
  return out;
}

export function WebhookForm({ runId, experimentId }: { runId: number; experimentId: number }) {
  const qc = useQueryClient();
  const [url, setUrl] = useState("");
  const [token, setToken] = useState("");
  const [format, setFormat] = useState<"slack" | "json">("slack");
  const [scope, setScope] = useState<Scope>("run");
  const [events, setEvents] = useState<Set<WebhookEventName>>(new Set(WEBHOOK_EVENTS.map((e) => e.event)));
  const subscribe = useMutation({
    mutationFn: () => {
      const body: WebhookCreate = { url: url.trim(), format, events: WEBHOOK_EVENTS.map((e) => e.event).filter((e) => events.has(e)) };
      if (token) body.token = token;
      return scope === "run"
        ? unwrap(sdk.createRunWebhook({ path: { run_id: runId }, body }))
        : unwrap(sdk.createExperimentWebhook({ path: { experiment_id: experimentId }, body }));
    },
    onSuccess: () => {
      setUrl(""); setToken(""); // secrets leave the page once the server has them
      qc.invalidateQueries({ queryKey: ["run-webhooks", runId] });
    },
  });
  const errors = byField(subscribe.error);
  const toggle = (event: WebhookEventName) => setEvents((old) => {
    const next = new Set(old);
    if (next.has(event)) next.delete(event); else next.add(event);
    return next;
  });
  return (
    <form className="webhook-form" aria-label="subscribe a webhook"
      onSubmit={(e) => { e.preventDefault(); subscribe.mutate(); }}>
      <label>Address
        <input type="url" name="url" required placeholder="https://hooks.slack.com/services/…" value={url}
          aria-invalid={!!errors.url} onChange={(e) => setUrl(e.target.value)} />
      </label>
      {errors.url && <p className="field-error" data-field-error="url">{errors.url}</p>}
      <div className="row">
        <label>Form
          <select name="format" value={format} onChange={(e) => setFormat(e.target.value as "slack" | "json")}>
            <option value="slack">Slack-compatible ({"{"}"text": …{"}"})</option>
            <option value="json">plain JSON (the event's fields)</option>
          </select>
        </label>
        <label>For
          <select name="scope" value={scope} onChange={(e) => setScope(e.target.value as Scope)}>
            <option value="run">this run</option>
            <option value="experiment">every run of its experiment</option>
          </select>
        </label>
        <label>Token (optional)
          <input type="password" name="token" autoComplete="off" value={token} aria-invalid={!!errors.token}
            placeholder="sent as Authorization: Bearer …" onChange={(e) => setToken(e.target.value)} />
        </label>
      </div>
      {errors.token && <p className="field-error" data-field-error="token">{errors.token}</p>}
      <fieldset className="row small">
        <legend>Tell when</legend>
        {WEBHOOK_EVENTS.map(({ event, label }) => (
          <label key={event} className="check">
            <input type="checkbox" name="events" value={event} checked={events.has(event)} onChange={() => toggle(event)} />
            {label}
          </label>
        ))}
      </fieldset>
      {errors.events && <p className="field-error" data-field-error="events">{errors.events}</p>}
      {errors[""] && <p className="field-error" data-field-error="">{errors[""]}</p>}
      <button type="submit" disabled={subscribe.isPending || events.size === 0}>
        {subscribe.isPending ? "Subscribing…" : "Subscribe"}
      </button>
      {subscribe.isSuccess && <span className="small muted" role="status"> Subscribed.</span>}
    </form>
  );
}
