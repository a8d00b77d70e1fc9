/** A "Download" menu: each item fetches a file through the API (with the token) and saves it. */
import { useState } from "react";

export interface DownloadItem {
  label: string;
  run: () => Promise<void>;
}

export function DownloadMenu({ items, label = "Download" }: { items: DownloadItem[]; label?: string }) {
  const [busy, setBusy] = useState<string | null>(null);
  const [error, setError] = useState<string | null>(null);
  return (
    <details className="download-menu">
      <summary className="button">{label}</summary>
      <div className="download-items card" role="menu">
        {items.map((it) => (
          <button key={it.label} type="button" role="menuitem" disabled={busy !== null} onClick={async () => {
            setBusy(it.label);
            setError(null);
            try {
              await it.run();
            } catch (e) {
              setError(e instanceof Error ? e.message : String(e));
            } finally {
              setBusy(null);
            }
          }}>{busy === it.label ? "Preparing…" : it.label}</button>
        ))}
        {error && <div className="field-error" role="alert">{error}</div>}
      </div>
    </details>
  );
}
