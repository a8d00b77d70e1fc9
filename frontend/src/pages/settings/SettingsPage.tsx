/** Settings: the API token (when the server runs with RLSTUDIO_API_TOKEN), kept in this browser's localStorage. */
import { useQueryClient } from "@tanstack/react-query";
import { useState } from "react";
import { Link } from "react-router-dom";
import { apiToken, setApiToken, unwrap } from "../../api/client";
import * as sdk from "../../client/sdk.gen";
import { PageTitle } from "../../components/Layout";

type Check = { state: "idle" | "checking" } | { state: "ok" } | { state: "error"; message: string };

export function SettingsPage() {
  const qc = useQueryClient();
  const [saved, setSaved] = useState(apiToken() ?? "");
  const [draft, setDraft] = useState(saved);
  const [check, setCheck] = useState<Check>({ state: "idle" });

  const test = async () => {
    setCheck({ state: "checking" });
    try {
      await unwrap(sdk.listRuns({ query: { limit: 1 } }));
      setCheck({ state: "ok" });
    } catch (e) {
      setCheck({ state: "error", message: (e as Error).message });
    }
  };
  const save = async (token: string) => {
    setApiToken(token);
    setSaved(token.trim());
    setDraft(token.trim());
    await qc.resetQueries(); // every query again, with the new header
    await test();
  };

  return (
    <div className="stack">
      <PageTitle>Settings</PageTitle>
      <section className="card settings">
        <h2>API token</h2>
        <p className="small muted">
          When the server runs with <code>RLSTUDIO_API_TOKEN</code>, every API call needs it. It is stored in this
          browser only (localStorage) and sent as <code>Authorization: Bearer …</code> (live updates pass it as
          <code> ?access_token=</code>).
        </p>
        <form className="row" onSubmit={(e) => { e.preventDefault(); void save(draft); }}>
          <input type="password" autoComplete="off" spellCheck={false} aria-label="API token" placeholder="paste the token"
            value={draft} onChange={(e) => setDraft(e.target.value)} style={{ minWidth: 320 }} />
          <button type="submit" className="primary" disabled={draft.trim() === saved}>Save</button>
          <button type="button" disabled={!saved} onClick={() => void save("")}>Forget</button>
          <button type="button" onClick={() => void test()}>Test</button>
        </form>
        <div className="small" style={{ marginTop: ".5rem" }} data-token-state={saved ? "set" : "unset"}>
          {saved ? "A token is saved in this browser." : "No token saved."}{" "}
          {check.state === "checking" && <span className="muted">checking…</span>}
          {check.state === "ok" && <span className="token-ok" role="status">The server accepts it. <Link to="/">Go to the runs →</Link></span>}
          {check.state === "error" && <span className="token-error" role="alert">The server refused: {check.message}</span>}
        </div>
      </section>
    </div>
  );
}
