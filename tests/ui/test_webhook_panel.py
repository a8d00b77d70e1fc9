"""The run page's webhooks panel (issue 35): who is told about the run (addresses masked by the server) and the
delivery log, updating as the server's sender works: an alarm raised while the page is open is delivered to one
receiver, retried then delivered to a flaky one, refused by a third. A real receiver (`http.server` on 127.0.0.1);
the secret path and token never reach the page."""
from __future__ import annotations

from playwright.sync_api import expect

from tests.backend.webhook_receiver import Receiver
from tests.ui.conftest import shot

SECRET = "/services/T9/B9/pageMustNotShowThis42"
TOKEN = "ui-webhook-token-abcdef123456"


def test_webhook_panel_shows_masked_subscribers_and_the_delivery_log(page, server):
    with Receiver() as ok, Receiver([503, 200]) as flaky, Receiver([404]) as refusing:
        run = server.api.external_run("webhooks-ui")
        server.api.status(run, "running")
        hooks = f"/api/v1/runs/{run['id']}/webhooks"
        server.api.call("POST", hooks, {"url": ok.url + SECRET, "format": "slack"})
        server.api.call("POST", hooks, {"url": flaky.url + "/flaky", "token": TOKEN, "events": ["alarm.fired"]})
        server.api.call("POST", hooks, {"url": refusing.url + "/gone", "events": ["alarm.fired"]})
        page.goto(f"{server.url}/runs/{run['id']}")
        panel = page.locator("section.webhooks")
        expect(panel).to_have_attribute("data-webhooks", "3")
        expect(panel).to_contain_text(f"{ok.url}/…is42")  # masked: scheme, host, the path's last 4 characters
        # an alarm while the page is open: rollout log-probs far from the actor's (rollout-mismatch fires)
        server.api.metrics(run, [{"key": "actor/rollout_log_probs_absdiff", "step": 1, "value": 0.5}])
        rows = panel.locator("tr[data-event='alarm.fired']")
        expect(rows).to_have_count(3)
        expect(panel.locator(f"tr[data-state='delivered']:has-text('{ok.url}')")).to_have_count(1)
        retried = panel.locator(f"tr[data-state='delivered']:has-text('{flaky.url}')")
        expect(retried).to_have_count(1)  # after a 503: retried with backoff, then delivered
        expect(retried.locator("td.num")).to_have_text("2")
        refused = panel.locator(f"tr[data-state='failed']:has-text('{refusing.url}')")
        expect(refused).to_contain_text("HTTP 404")
        expect(refused.locator("td.num")).to_have_text("1")  # a refusal is not retried
        text = page.locator("body").inner_text()
        assert "pageMustNotShowThis42" not in text and TOKEN not in text
        assert next(b["text"] for b in ok.bodies(SECRET)).startswith("🛑 Run")
        assert [r["answered"] for r in flaky.requests] == [503, 200]
        shot(page, "run-webhooks")
        assert not page.errors, page.errors
