/** Import: a run made elsewhere becomes a run here. verl: the file logger's JSONL (VERL_FILE_LOGGER_PATH), with its
 *  Hydra config and its rollout / validation generation dumps when given; TensorBoard: event files. The imported
 *  run then sits in the runs table and on Compare beside rlstudio's runs. */
import { useQueryClient } from "@tanstack/react-query";
import { useState } from "react";
import { Link, useSearchParams } from "react-router-dom";
import { qk } from "../../api/queries";
import { PageTitle } from "../../components/Layout";
import { formData, ImportError, upload, type ImportFiles, type ImportKind, type ImportResult } from "./upload";

type State = { phase: "idle" } | { phase: "sending"; progress: number } | { phase: "done"; result: ImportResult }
  | { phase: "error"; error: ImportError };

function FilePick({ label, name, accept, multiple, hint, onChange, invalid }: {
  label: string; name: string; accept?: string; multiple?: boolean; hint: string; invalid?: boolean;
  onChange: (files: File[]) => void;
}) {
  return (
    <label className="stack" style={{ gap: ".2rem", alignItems: "flex-start" }} data-field={name}>
      <span><strong>{label}</strong> <span className="small muted">{hint}</span></span>
      <input type="file" name={name} aria-label={label} accept={accept} multiple={multiple} aria-invalid={invalid || undefined}
        onChange={(e) => onChange(Array.from(e.target.files ?? []))} />
    </label>
  );
}

export function ImportPage() {
  const [params, setParams] = useSearchParams();
  const kind: ImportKind = params.get("kind") === "tensorboard" ? "tensorboard" : "verl";
  const [files, setFiles] = useState<ImportFiles>({});
  const [experiment, setExperiment] = useState("imported");
  const [name, setName] = useState("");
  const [tags, setTags] = useState("");
  const [state, setState] = useState<State>({ phase: "idle" });
  const qc = useQueryClient();
  const ready = kind === "verl" ? !!files.metrics : !!files.events?.length;
  const badField = state.phase === "error" ? state.error.field : null;

  const submit = async () => {
    setState({ phase: "sending", progress: 0 });
    try {
      const result = await upload(kind, formData(kind, files, { experiment, name, tags }),
        (progress) => setState({ phase: "sending", progress }));
      setState({ phase: "done", result });
      void qc.invalidateQueries({ queryKey: qk.allRuns });
    } catch (e) {
      setState({ phase: "error", error: e instanceof ImportError ? e : new ImportError(String(e), null) });
    }
  };

  return (
    <div className="stack">
      <PageTitle actions={<Link to="/">Runs</Link>}>Import a run</PageTitle>
      <section className="card stack">
        <div className="row" role="radiogroup" aria-label="format">
          {(["verl", "tensorboard"] as const).map((k) => (
            <label key={k} className="badge">
              <input type="radio" name="kind" checked={kind === k}
                onChange={() => { setParams(k === "verl" ? {} : { kind: k }, { replace: true }); setState({ phase: "idle" }); }} />
              {k === "verl" ? "verl (file logger JSONL)" : "TensorBoard event files"}
            </label>
          ))}
        </div>
        {kind === "verl" ? (
          <>
            <p className="small muted">
              From a verl run started with <code>trainer.logger=[console,file]</code>: the JSONL at <code>VERL_FILE_LOGGER_PATH</code>,
              and when you have them its <code>.hydra/config.yaml</code> and the <code>&lt;step&gt;.jsonl</code> files
              of <code>trainer.rollout_data_dir</code> and <code>trainer.validation_data_dir</code>.
              Command line: <code>python -m backend.import_run verl metrics.jsonl --rollout-dir DIR</code>.
            </p>
            <FilePick label="Metrics (JSONL)" name="metrics" accept=".jsonl,.json,.txt" hint="required: one line per step"
              invalid={badField === "metrics"} onChange={(f) => setFiles((s) => ({ ...s, metrics: f[0] ?? null }))} />
            <FilePick label="Config" name="config" accept=".yaml,.yml,.json" hint="optional: .hydra/config.yaml"
              invalid={badField === "config"} onChange={(f) => setFiles((s) => ({ ...s, config: f[0] ?? null }))} />
            <FilePick label="Rollout dumps" name="rollout" accept=".jsonl" multiple hint="optional: training answers, <step>.jsonl"
              invalid={badField === "rollout"} onChange={(f) => setFiles((s) => ({ ...s, rollout: f }))} />
            <FilePick label="Validation dumps" name="validation" accept=".jsonl" multiple hint="optional: held-out answers, <step>.jsonl"
              invalid={badField === "validation"} onChange={(f) => setFiles((s) => ({ ...s, validation: f }))} />
          </>
        ) : (
          <>
            <p className="small muted">
              Event files (<code>events.out.tfevents.*</code>) of one run: verl's <code>tensorboard</code> logger, TRL's default.
              Every scalar becomes a metric.
            </p>
            <FilePick label="Event files" name="events" multiple hint="required"
              invalid={badField === "events"} onChange={(f) => setFiles((s) => ({ ...s, events: f }))} />
          </>
        )}
        <div className="row">
          <label>Experiment <input value={experiment} aria-label="experiment" onChange={(e) => setExperiment(e.target.value)} /></label>
          <label>Run name <input value={name} aria-label="run name" placeholder="from the config, else the file"
            onChange={(e) => setName(e.target.value)} /></label>
          <label>Tags <input value={tags} aria-label="tags" placeholder="a, b" onChange={(e) => setTags(e.target.value)} /></label>
        </div>
        <div className="row">
          <button type="button" className="primary" disabled={!ready || state.phase === "sending"} onClick={() => void submit()}>
            Import
          </button>
          {state.phase === "sending" && (
            <span className="small muted" role="status">
              {state.progress < 1 ? `uploading ${Math.round(state.progress * 100)}%` : "reading and storing…"}
            </span>
          )}
        </div>
        {state.phase === "error" && (
          <div className="token-error" role="alert" data-import-error={state.error.field ?? ""}>
            Not imported (nothing was stored): {state.error.message}
          </div>
        )}
        {state.phase === "done" && <Imported result={state.result} />}
      </section>
    </div>
  );
}

function Imported({ result }: { result: ImportResult }) {
  const samples = Object.entries(result.samples).map(([split, n]) => `${n} ${split}`).join(", ") || "none";
  const skipped = Object.keys(result.skipped_values);
  return (
    <div className="token-ok" role="status" data-imported-run={result.run.id}>
      Imported <Link to={`/runs/${result.run.id}`}><strong>{result.run.name}</strong></Link>: {result.steps} steps,{" "}
      {result.points.toLocaleString()} points, answers: {samples}.
      {skipped.length > 0 && <div className="small muted">Left out (not numbers): {skipped.join(", ")}</div>}
      {result.notes.map((n) => <div key={n} className="small muted">{n}</div>)}
      <div className="small"><Link to={`/?experiment=${result.run.experiment_id}`}>See it among the runs</Link> · tick it and another run there to compare.</div>
    </div>
  );
}
