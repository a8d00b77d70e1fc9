/**
 * New run: a form generated from the engine's JSON Schema. Essentials first, every other key under
 * "Advanced"; presets; a box that fills the form from a pasted verl command; server 422s shown at the field.
 * `?fork=<id>` opens it prefilled from that run (and submits a fork); `?preset=<name>` picks a preset.
 */
import { useMutation, useQueryClient } from "@tanstack/react-query";
import { useMemo, useRef, useState } from "react";
import { Link, useNavigate, useSearchParams } from "react-router-dom";
import { ApiError } from "../../api/client";
import { qk, runWrites, useConfigSchema, usePresets, useRun } from "../../api/queries";
import { PageTitle } from "../../components/Layout";
import { ErrorBox, Loading } from "../../components/States";
import { flatten, formatJson, sameValue, unflatten, type Json } from "../../lib/configDiff";
import { pasteBase, presetValuesNotSet, type PasteWhy } from "../../lib/pasteBase";
import { errorField, essentialsFirst, fieldsFromSchema, fromText, toText, type Field } from "../../lib/schemaForm";
import { aliasesFromSchema, parseCommand, toCommand, type HydraValue } from "../../lib/verlCommand";
import { FieldInput, fieldDomId, type Raw } from "./FieldInput";
import { presetLabel, presetOrder, PRESET_LABELS } from "./presets";

function rawOf(field: Field, value: HydraValue | undefined): Raw {
  if (field.kind === "boolean") return value === null || value === undefined ? (field.nullable ? null : false) : Boolean(value);
  if (field.kind === "enum") return value === null || value === undefined ? null : String(value);
  return toText(field, value);
}

function valueOf(field: Field, raw: Raw): { ok: true; value: HydraValue } | { ok: false; error: string } {
  if (field.kind === "boolean") return { ok: true, value: raw === null ? null : Boolean(raw) };
  if (field.kind === "enum") return raw === null ? { ok: true, value: null } : fromText(field, String(raw));
  return fromText(field, raw === null ? "" : String(raw));
}

export function NewRunPage() {
  const [params, setParams] = useSearchParams();
  const forkId = params.get("fork") ? Number(params.get("fork")) : null;
  const schema = useConfigSchema();
  const presets = usePresets();
  const parent = useRun(forkId);
  // a pasted command that belongs on another base (verl's defaults, its --config-name) switches the preset,
  // which remounts the form: the paste travels across the switch and is applied by the new form
  const [pending, setPending] = useState<PendingPaste | null>(null);
  if (schema.isLoading || presets.isLoading || (forkId !== null && parent.isLoading)) return <Loading what="Loading the run-config schema" />;
  const error = schema.error ?? presets.error ?? parent.error;
  if (error) return <ErrorBox error={error} retry={() => { void schema.refetch(); void presets.refetch(); }} />;
  const presetNames = presetOrder((presets.data?.data ?? []).map((p) => p.name));
  // no ?preset: the first demo (the server names it); ?preset= (empty): the engine's defaults
  const asked = params.get("preset");
  const demo = presets.data?.demo ?? null;
  const preset = forkId !== null ? null : asked === null ? (demo !== null && presetNames.includes(demo) ? demo : null) : asked || null;
  const key = forkId !== null ? `fork-${forkId}` : `preset-${preset ?? ""}`;
  return (
    <RunForm key={key} schema={schema.data as object} presets={presets.data?.data ?? []} presetNames={presetNames}
      preset={preset} parent={forkId !== null ? parent.data ?? null : null} pending={pending?.preset === preset ? pending : null}
      onPreset={(name, paste) => {
        setPending(paste ? { ...paste, preset: name } : null);
        setParams(name === null ? { preset: "" } : { preset: name });
      }} />
  );
}

interface PendingPaste {
  text: string;
  preset: string | null;
  /** the preset that was selected when the command was pasted */
  from: string | null;
  chosen: boolean;
}

interface PasteReport {
  applied: number;
  unknown: string[];
  ignored: string[];
  base: string | null;
  why: PasteWhy;
  /** the preset set aside for verl's defaults (a whole command was pasted over it) */
  replaced: string | null;
  /** the base preset's values the command did not set */
  kept: [string, Json][];
}

interface FormProps {
  schema: object;
  presets: { name: string; config: Record<string, unknown> }[];
  presetNames: string[];
  preset: string | null;
  parent: { id: number; name?: string; resolved_config: Record<string, unknown>; tags?: string[] } | null;
  pending: PendingPaste | null;
  onPreset: (name: string | null, paste?: Omit<PendingPaste, "preset">) => void;
}

function RunForm({ schema, presets, presetNames, preset, parent, pending, onPreset }: FormProps) {
  const navigate = useNavigate();
  const qc = useQueryClient();
  const fields = useMemo(() => fieldsFromSchema(schema), [schema]);
  const byKey = useMemo(() => new Map(fields.map((f) => [f.key, f])), [fields]);
  const { essentials, advanced } = useMemo(() => essentialsFirst(fields), [fields]);

  // the starting point: engine defaults, overlaid with the preset's values or the parent run's config
  const base = useMemo(() => {
    const out: Record<string, HydraValue | undefined> = {};
    for (const f of fields) out[f.key] = f.default;
    const overlay = parent ? parent.resolved_config : presets.find((p) => p.name === preset)?.config ?? {};
    for (const [k, v] of Object.entries(flatten(overlay))) if (byKey.has(k)) out[k] = v as HydraValue;
    return out;
  }, [fields, byKey, presets, preset, parent]);

  const defaults = useMemo(() => Object.fromEntries(fields.map((f) => [f.key, f.default])), [fields]);

  /** The form values a pasted command sets, and what to tell the user about the base underneath them. */
  const readPaste = (text: string, base: string | null, why: PasteWhy, replaced: string | null) => {
    const parsed = parseCommand(text);
    const unknown: string[] = [];
    const next: Record<string, Raw> = {};
    for (const [key, value] of Object.entries(parsed.values)) {
      const f = byKey.get(key);
      if (!f) unknown.push(key);
      else next[key] = rawOf(f, value);
    }
    const baseConfig = parent ? null : presets.find((p) => p.name === base)?.config;
    const kept = baseConfig ? presetValuesNotSet(baseConfig, Object.keys(next), defaults, (k) => byKey.has(k)) : [];
    const report: PasteReport = { applied: Object.keys(next).length, unknown, ignored: parsed.ignored, base, why, replaced, kept };
    return { next, report };
  };
  const initialPaste = useMemo(
    () => (pending ? readPaste(pending.text, preset, pending.chosen ? "chosen" : parseCommand(pending.text).configName ? "config-name" : "full-command",
      pending.chosen || pending.from === preset ? null : pending.from) : null),
    // eslint-disable-next-line react-hooks/exhaustive-deps
    []);

  const [edits, setEdits] = useState<Record<string, Raw>>(initialPaste?.next ?? {});
  const [name, setName] = useState(parent ? `${parent.name ?? `run-${parent.id}`}-fork` : "");
  const [experiment, setExperiment] = useState("");
  const [tags, setTags] = useState(parent?.tags?.join(", ") ?? "");
  const [serverErrors, setServerErrors] = useState<Record<string, string>>({});
  const [generalErrors, setGeneralErrors] = useState<string[]>([]);
  const [paste, setPaste] = useState(pending?.text ?? "");
  const [pasteReport, setPasteReport] = useState<PasteReport | null>(initialPaste?.report ?? null);
  const [advancedOpen, setAdvancedOpen] = useState(() => Object.keys(initialPaste?.next ?? {}).some((k) => !essentials.some((f) => f.key === k)));
  const [advancedFilter, setAdvancedFilter] = useState("");
  const formRef = useRef<HTMLFormElement>(null);

  const rawFor = (f: Field): Raw => (f.key in edits ? edits[f.key] : rawOf(f, base[f.key]));
  const clientErrors: Record<string, string> = {};
  const changed: Record<string, HydraValue> = {};
  for (const [key, raw] of Object.entries(edits)) {
    const f = byKey.get(key);
    if (!f) continue;
    const v = valueOf(f, raw);
    if (!v.ok) clientErrors[key] = v.error;
    else if (!sameValue(v.value, base[key] ?? null)) changed[key] = v.value;
  }

  const setField = (key: string, raw: Raw) => {
    setEdits((e) => ({ ...e, [key]: raw }));
    setServerErrors(({ [key]: _drop, ...rest }) => rest);
  };

  const applyPaste = (chosen?: string | null) => {
    const plan = pasteBase(parseCommand(paste, aliasesFromSchema(schema)), preset, presetNames, { fork: parent !== null, ...(chosen !== undefined ? { chosen } : {}) });
    if (plan.base !== preset) {
      onPreset(plan.base, { text: paste, from: preset, chosen: chosen !== undefined });
      return;
    }
    const { next, report } = readPaste(paste, plan.base, plan.why, null);
    setEdits((e) => ({ ...e, ...next }));
    setPasteReport(report);
    if (Object.keys(next).some((k) => advanced.some((f) => f.key === k))) setAdvancedOpen(true);
  };

  const focusField = (key: string) => {
    if (advanced.some((f) => f.key === key)) setAdvancedOpen(true);
    setTimeout(() => {
      const el = document.getElementById(fieldDomId(key));
      el?.scrollIntoView({ block: "center" });
      el?.focus();
    }, 50);
  };

  const submit = useMutation({
    mutationFn: async () => {
      const config = unflatten(changed) as Record<string, unknown>;
      const tagList = tags.split(",").map((t) => t.trim()).filter(Boolean);
      if (parent) {
        return runWrites.fork(parent.id, { name: name || null, config, tags: tagList });
      }
      return runWrites.create({ name, preset, config, tags: tagList, ...(experiment.trim() ? { experiment_name: experiment.trim() } : {}) });
    },
    onMutate: () => {
      setServerErrors({});
      setGeneralErrors([]);
    },
    onSuccess: (run) => {
      void qc.invalidateQueries({ queryKey: qk.allRuns });
      navigate(`/runs/${run.id}`);
    },
    onError: (e) => {
      if (e instanceof ApiError && e.fieldErrors.length) {
        const atFields: Record<string, string> = {};
        const general: string[] = [];
        for (const d of e.fieldErrors) {
          const key = errorField(d);
          if (byKey.has(key)) atFields[key] = d.msg;
          else general.push(key && !["name", "tags", "preset", "experiment_name"].includes(key) ? `${key}: ${d.msg}` : d.msg);
        }
        setServerErrors(atFields);
        setGeneralErrors(general);
        const first = Object.keys(atFields)[0];
        if (first) focusField(first);
      } else {
        setGeneralErrors([e instanceof Error ? e.message : String(e)]);
      }
    },
  });

  const onSubmit = (ev: React.FormEvent) => {
    ev.preventDefault();
    const firstBad = Object.keys(clientErrors)[0];
    if (firstBad) {
      focusField(firstBad);
      return;
    }
    submit.mutate();
  };

  const renderField = (f: Field) => (
    <FieldInput key={f.key} field={f} raw={rawFor(f)} changed={f.key in changed}
      error={clientErrors[f.key] ?? serverErrors[f.key]} onChange={(raw) => setField(f.key, raw)} />
  );
  const filteredAdvanced = advanced.filter((f) => !advancedFilter || f.key.includes(advancedFilter) || f.description.toLowerCase().includes(advancedFilter.toLowerCase()));
  const sections = [...new Set(filteredAdvanced.map((f) => f.section))];
  const changedCount = Object.keys(changed).length;

  return (
    <form ref={formRef} className="stack" onSubmit={onSubmit} noValidate aria-label="new run">
      <PageTitle actions={<Link to="/" className="button">Cancel</Link>}>
        {parent ? <>Fork of <Link to={`/runs/${parent.id}`}>{parent.name || `run ${parent.id}`}</Link></> : "New run"}
      </PageTitle>

      {!parent && (
        <section className="card">
          <h2>Start from</h2>
          <div className="preset-cards" role="group" aria-label="presets">
            {presetNames.map((n) => (
              <button key={n} type="button" className="preset-card" aria-pressed={preset === n} data-preset={n} onClick={() => onPreset(n)}>
                <strong>{presetLabel(n)}</strong>
                <span className="small muted">{PRESET_LABELS[n]?.help ?? `engine/configs/${n}.yaml`}</span>
              </button>
            ))}
            <button type="button" className="preset-card" aria-pressed={preset === null} onClick={() => onPreset(null)}>
              <strong>Engine defaults</strong><span className="small muted">verl's defaults, no preset</span>
            </button>
          </div>
        </section>
      )}

      <section className="card">
        <h2><label htmlFor="paste-command">Paste a verl command</label></h2>
        <textarea id="paste-command" rows={4} value={paste} onChange={(e) => setPaste(e.target.value)}
          placeholder={"python3 -m verl.trainer.main_ppo data.train_batch_size=256 actor_rollout_ref.actor.optim.lr=1e-6 trainer.logger=['console'] ..."} />
        <div className="row" style={{ marginTop: ".4rem" }}>
          <button type="button" onClick={() => applyPaste()} disabled={!paste.trim()}>Fill the form</button>
          {pasteReport && (
            <span className="small" role="status">
              {pasteReport.applied} value{pasteReport.applied === 1 ? "" : "s"} filled
              {parent ? " over the parent run's config." : pasteReport.base === null ? <> over <strong data-paste-base="defaults">verl's defaults</strong> (engine defaults), as when the command runs.</>
                : <> over the preset <strong data-paste-base={pasteReport.base}>{presetLabel(pasteReport.base)}</strong>{pasteReport.why === "config-name" ? " (its --config-name)" : ""}.</>}
              {pasteReport.unknown.length > 0 && <span className="field-error"> Not in the schema (not applied): {pasteReport.unknown.join(", ")}.</span>}
              {pasteReport.ignored.length > 0 && <span className="muted"> Ignored: {pasteReport.ignored.join(" ")}</span>}
            </span>
          )}
        </div>
        {pasteReport && !parent && pasteReport.replaced !== null && (
          <p className="small notice" data-paste-replaced={pasteReport.replaced}>
            The preset <strong>{presetLabel(pasteReport.replaced)}</strong> was set aside: a whole command starts from verl's defaults.{" "}
            <button type="button" className="link-button" onClick={() => applyPaste(pasteReport.replaced)}>Lay the command over {presetLabel(pasteReport.replaced)} instead</button>
          </p>
        )}
        {pasteReport && !parent && pasteReport.base !== null && (
          <details className="small" open={pasteReport.kept.length > 0 && pasteReport.kept.length <= 12} data-paste-kept={pasteReport.kept.length}>
            <summary>{pasteReport.kept.length} value{pasteReport.kept.length === 1 ? "" : "s"} of {presetLabel(pasteReport.base)} the command did not set (kept)</summary>
            <ul className="mono kept-values">
              {pasteReport.kept.map(([k, v]) => <li key={k}>{k}={formatJson(v)}</li>)}
            </ul>
            {pasteReport.why !== "config-name" && (
              <button type="button" className="link-button" onClick={() => applyPaste(null)}>Start from verl's defaults instead</button>
            )}
          </details>
        )}
      </section>

      <section className="card">
        <h2>Run</h2>
        <div className="form-section">
          <div className="field"><label htmlFor="run-name">Name</label>
            <input id="run-name" value={name} onChange={(e) => setName(e.target.value)} placeholder="(automatic)" /></div>
          {!parent && <div className="field"><label htmlFor="run-experiment">Experiment</label>
            <input id="run-experiment" value={experiment} onChange={(e) => setExperiment(e.target.value)} placeholder="default" /></div>}
          <div className="field"><label htmlFor="run-tags">Tags</label>
            <input id="run-tags" value={tags} onChange={(e) => setTags(e.target.value)} placeholder="comma, separated" /></div>
        </div>
      </section>

      <section className="card">
        <h2>Essentials</h2>
        <div className="form-section">{essentials.map(renderField)}</div>
      </section>

      <details className="card" open={advancedOpen} onToggle={(e) => setAdvancedOpen((e.target as HTMLDetailsElement).open)}>
        <summary><strong>Advanced</strong> <span className="muted small">— {advanced.length} more keys</span></summary>
        {advancedOpen && (
          <div>
            <input type="search" placeholder="filter keys" aria-label="filter advanced keys" value={advancedFilter}
              onChange={(e) => setAdvancedFilter(e.target.value)} style={{ margin: ".6rem 0" }} />
            {sections.map((s) => (
              <div key={s} className="advanced-group">
                <h3>{s}</h3>
                <div className="form-section">{filteredAdvanced.filter((f) => f.section === s).map(renderField)}</div>
              </div>
            ))}
          </div>
        )}
      </details>

      {generalErrors.length > 0 && <div className="notice error" role="alert">{generalErrors.map((g, i) => <div key={i}>{g}</div>)}</div>}
      {Object.keys(serverErrors).length > 0 && (
        <div className="notice error" role="alert">The server refused the config: see the highlighted field{Object.keys(serverErrors).length > 1 ? "s" : ""}.</div>
      )}

      <section className="card">
        <details>
          <summary className="small">As a command ({changedCount} key{changedCount === 1 ? "" : "s"} set on top of {parent ? "the parent run" : preset ? presetLabel(preset) : "the defaults"})</summary>
          <pre className="log-tail">{toCommand(changed) + (preset && !parent ? ` \\\n    --config-name ${preset}` : "")}</pre>
        </details>
        <div className="row" style={{ marginTop: ".6rem" }}>
          <button type="submit" className="primary" disabled={submit.isPending}>{submit.isPending ? "Launching…" : parent ? "Launch fork" : "Launch run"}</button>
          {Object.keys(clientErrors).length > 0 && <span className="field-error">Fix the highlighted fields first.</span>}
        </div>
      </section>
    </form>
  );
}
