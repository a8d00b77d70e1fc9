/** The run's resolved config as dotted keys; the keys the user set are marked. */
import { useState } from "react";
import { flatten, formatJson } from "../../lib/configDiff";

export function ConfigView({ config, edited }: { config: Record<string, unknown>; edited: Record<string, unknown> }) {
  const [filter, setFilter] = useState("");
  const [onlyEdited, setOnlyEdited] = useState(false);
  const flat = flatten(config);
  const mine = new Set(Object.keys(flatten(edited)));
  const rows = Object.entries(flat).filter(([k]) => k.includes(filter) && (!onlyEdited || mine.has(k)));
  return (
    <div>
      <div className="row" style={{ marginBottom: ".5rem" }}>
        <input type="search" placeholder="filter keys" aria-label="filter config keys" value={filter} onChange={(e) => setFilter(e.target.value)} />
        <label><input type="checkbox" checked={onlyEdited} onChange={(e) => setOnlyEdited(e.target.checked)} /> only keys set for this run</label>
      </div>
      <div style={{ maxHeight: 340, overflow: "auto" }}>
        <dl className="kv">
          {rows.map(([k, v]) => (
            <div key={k} style={{ display: "contents" }}>
              <dt style={mine.has(k) ? { color: "var(--accent)" } : undefined}>{k}</dt>
              <dd>{formatJson(v)}</dd>
            </div>
          ))}
        </dl>
      </div>
    </div>
  );
}
