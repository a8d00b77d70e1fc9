/** The run page's webhooks (issue 35): who is told about this run (its own webhooks and its experiment's, their
 *  addresses masked by the server) and the delivery log: each event sent, its state, attempts and last answer.
 *  Polled while a delivery is waiting or the run may still send one; subscribing is the API's
 *  (POST /api/v1/runs/{id}/webhooks, /experiments/{id}/webhooks). */
import { useQuery } from "@tanstack/react-query";
import * as sdk from "../../client/sdk.gen";
import type { WebhookDeliveryPublic } from "../../client/types.gen";
import { unwrap } from "../../api/client";
import { fmtDate } from "../../lib/format";

const STATE_CLASS: Record<string, string> = {
  delivered: "status-succeeded", failed: "status-failed", retrying: "status-cancelled", pending: "status-queued",
};

function waiting(rows: WebhookDeliveryPublic[] | undefined): boolean {
  return !!rows?.some((d) => d.state === "pending" || d.state === "retrying");
}

function lastAnswer(d: WebhookDeliveryPublic): string {
  if (d.state === "delivered") return d.last_status != null ? `HTTP ${d.last_status}` : "";
  return d.last_error ?? (d.state === "pending" ? "not sent yet" : "");
}

export function WebhookPanel({ runId, active }: { runId: number; active: boolean }) {
  const hooks = useQuery({
    queryKey: ["run-webhooks", runId],
    queryFn: () => unwrap(sdk.listRunWebhooks({ path: { run_id: runId } })),
  });
  const log = useQuery({
    queryKey: ["webhook-deliveries", runId],
    queryFn: () => unwrap(sdk.listWebhookDeliveries({ path: { run_id: runId }, query: { limit: 50 } })),
    // a delivery waiting for its next attempt, or a run that may still end or raise an alarm: look again
    refetchInterval: (query) => (waiting(query.state.data?.data) ? 1000 : active ? 5000 : false),
  });
  const subscribed = hooks.data?.data ?? [];
  const rows = log.data?.data ?? [];
  if (subscribed.length === 0 && rows.length === 0) return null; // nobody subscribed: nothing to show
  return (
    <section className="card webhooks" aria-label="webhooks" data-webhooks={subscribed.length}>
      <h2>Webhooks</h2>
      <p className="small muted">
        Told about this run:{" "}
        {subscribed.map((h, i) => (
          <span key={h.id} data-webhook-id={h.id}>
            {i > 0 && ", "}
            <span className="mono">{h.url_masked}</span> ({h.format}{h.experiment_id != null ? ", its experiment's" : ""}
            {h.enabled ? "" : ", off"})
          </span>
        ))}
        {subscribed.length === 0 && "no one now."}
      </p>
      {rows.length > 0 && (
        <table className="small webhook-deliveries">
          <thead><tr><th>When</th><th>Event</th><th>To</th><th>State</th><th className="num">Attempts</th><th>Last answer</th></tr></thead>
          <tbody>
            {rows.map((d) => (
              <tr key={d.id} data-delivery-id={d.id} data-state={d.state} data-event={d.event}>
                <td>{fmtDate(d.created_at)}</td>
                <td title={typeof d.payload.text === "string" ? d.payload.text : undefined}>{d.event}</td>
                <td className="mono">{d.url_masked}</td>
                <td><span className={`badge ${STATE_CLASS[d.state] ?? ""}`}>{d.state}</span></td>
                <td className="num">{d.attempts}</td>
                <td className="mono">{lastAnswer(d)}</td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
    </section>
  );
}
