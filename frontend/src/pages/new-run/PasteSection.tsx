/** The "Paste a verl command" card: the box, the fill button, and what the last fill did. */
import { formatJson } from "../../lib/configDiff";
import { presetLabel } from "./presets";
import type { PasteReport } from "./usePaste";

interface Props {
  text: string;
  onText: (text: string) => void;
  report: PasteReport | null;
  /** the server is reading the command */
  busy: boolean;
  /** why the server could not read it */
  error: string | null;
  /** a fork fills over the parent run's config: no preset to report */
  fork: boolean;
  onApply: (chosen?: string | null) => void;
}

export function PasteSection({ text, onText, report, busy, error, fork, onApply }: Props) {
  return (
    <section className="card">
      <h2><label htmlFor="paste-command">Paste a verl command</label></h2>
      <textarea id="paste-command" rows={4} value={text} onChange={(e) => onText(e.target.value)}
        placeholder={"python3 -m verl.trainer.main_ppo data.train_batch_size=256 actor_rollout_ref.actor.optim.lr=1e-6 trainer.logger=['console'] ..."} />
      <div className="row" style={{ marginTop: ".4rem" }}>
        <button type="button" onClick={() => onApply()} disabled={!text.trim() || busy}>Fill the form</button>
        {error && <span className="small field-error" role="alert">{error}</span>}
        {report && (
          <span className="small" role="status">
            {report.applied} value{report.applied === 1 ? "" : "s"} filled
            {fork ? " over the parent run's config." : report.base === null ? <> over <strong data-paste-base="defaults">verl's defaults</strong> (engine defaults), as when the command runs.</>
              : <> over the preset <strong data-paste-base={report.base}>{presetLabel(report.base)}</strong>{report.why === "config-name" ? " (its --config-name)" : ""}.</>}
            {report.unknown.length > 0 && <span className="field-error"> Not in the schema (not applied): {report.unknown.join(", ")}.</span>}
            {report.ignored.length > 0 && <span className="muted"> Ignored: {report.ignored.join(" ")}</span>}
          </span>
        )}
      </div>
      {report && !fork && report.replaced !== null && (
        <p className="small notice" data-paste-replaced={report.replaced}>
          The preset <strong>{presetLabel(report.replaced)}</strong> was set aside: a whole command starts from verl's defaults.{" "}
          <button type="button" className="link-button" onClick={() => onApply(report.replaced)}>Lay the command over {presetLabel(report.replaced)} instead</button>
        </p>
      )}
      {report && !fork && report.base !== null && (
        <details className="small" open={report.kept.length > 0 && report.kept.length <= 12} data-paste-kept={report.kept.length}>
          <summary>{report.kept.length} value{report.kept.length === 1 ? "" : "s"} of {presetLabel(report.base)} the command did not set (kept)</summary>
          <ul className="mono kept-values">
            {report.kept.map(([k, v]) => <li key={k}>{k}={formatJson(v)}</li>)}
          </ul>
          {report.why !== "config-name" && (
            <button type="button" className="link-button" onClick={() => onApply(null)}>Start from verl's defaults instead</button>
          )}
        </details>
      )}
    </section>
  );
}
