/**
 * The new-run (or fork) form itself: the schema's fields over a base (engine defaults overlaid with a preset
 * or the parent run's config), the paste box, run name/experiment/tags, and submit with the server's 422s
 * shown at their fields.
 */
import { useMutation, useQueryClient } from "@tanstack/react-query";
import { useMemo, useState } from "react";
import { Link, useNavigate } from "react-router-dom";
import { ApiError } from "../../api/client";
import { qk, runWrites, useCommandText, useConfigPlan, useGrammarRead } from "../../api/queries";
import { PageTitle } from "../../components/Layout";
import { flatten, sameValue, unflatten } from "../../lib/configDiff";
import { essentialsFirst, fieldsFromSchema, type Field } from "../../lib/schemaForm";
import { useDebounced } from "../../lib/useDebounced";
import type { HydraValue } from "../../lib/hydraValue";
import { FieldGroupCard } from "./FieldGroupCard";
import { FieldInput, fieldDomId, type Raw } from "./FieldInput";
import { grammarTextOf, rawOf, valueOf } from "./fieldValues";
import { PasteSection } from "./PasteSection";
import { PresetPicker } from "./PresetPicker";
import { presetLabel } from "./presets";
import { splitServerErrors } from "./serverErrors";
import { usePaste, type PendingPaste } from "./usePaste";

export interface RunFormProps {
  schema: object;
  presets: { name: string; config: Record<string, unknown> }[];
  presetNames: string[];
  preset: string | null;
  parent: { id: number; name?: string; resolved_config: Record<string, unknown>; tags?: string[] } | null;
  pending: PendingPaste | null;
  onPreset: (name: string | null, paste?: Omit<PendingPaste, "preset">) => void;
}

export function RunForm({ schema, presets, presetNames, preset, parent, pending, onPreset }: RunFormProps) {
  const navigate = useNavigate();
  const qc = useQueryClient();
  const fields = useMemo(() => fieldsFromSchema(schema), [schema]);
  const byKey = useMemo(() => new Map(fields.map((f) => [f.key, f])), [fields]);
  const { essentials, groups, advanced } = useMemo(() => essentialsFirst(fields), [fields]);

  // the starting point: engine defaults, overlaid with the preset's values or the parent run's config
  const base = useMemo(() => {
    const out: Record<string, HydraValue | undefined> = {};
    for (const f of fields) out[f.key] = f.default;
    const overlay = parent ? parent.resolved_config : presets.find((p) => p.name === preset)?.config ?? {};
    for (const [k, v] of Object.entries(flatten(overlay))) if (byKey.has(k)) out[k] = v as HydraValue;
    return out;
  }, [fields, byKey, presets, preset, parent]);

  const defaults = useMemo(() => Object.fromEntries(fields.map((f) => [f.key, f.default])), [fields]);

  const paste = usePaste({
    byKey, defaults, presets, presetNames, preset, fork: parent !== null, pending, onPreset,
    onFill: (next) => {
      setEdits((e) => ({ ...e, ...next }));
      if (Object.keys(next).some((k) => advanced.some((f) => f.key === k))) setAdvancedOpen(true);
    },
  });

  const [edits, setEdits] = useState<Record<string, Raw>>(paste.initial ?? {});
  const [name, setName] = useState(parent ? `${parent.name ?? `run-${parent.id}`}-fork` : "");
  const [experiment, setExperiment] = useState("");
  const [tags, setTags] = useState(parent?.tags?.join(", ") ?? "");
  const [serverErrors, setServerErrors] = useState<Record<string, string>>({});
  const [generalErrors, setGeneralErrors] = useState<string[]>([]);
  const [advancedOpen, setAdvancedOpen] = useState(() => Object.keys(paste.initial ?? {}).some((k) => !essentials.some((f) => f.key === k)));
  const [advancedFilter, setAdvancedFilter] = useState("");

  const rawFor = (f: Field): Raw => (f.key in edits ? edits[f.key] : rawOf(f, base[f.key]));
  // lists and free-form values are read by the engine's grammar on the server, not by a copy of it here
  const read = useGrammarRead(Object.entries(edits).flatMap(([key, raw]) => {
    const f = byKey.get(key);
    const text = f ? grammarTextOf(f, raw) : null;
    return text === null ? [] : [text];
  }));
  const valueFor = (f: Field, raw: Raw = rawFor(f)) => valueOf(f, raw, read);
  const clientErrors: Record<string, string> = {};
  const unread: string[] = [];
  const changed: Record<string, HydraValue> = {};
  for (const [key, raw] of Object.entries(edits)) {
    const f = byKey.get(key);
    if (!f) continue;
    const v = valueFor(f, raw);
    if (!v.ok && v.pending) unread.push(key);
    else if (!v.ok) clientErrors[key] = v.error;
    else if (!sameValue(v.value, base[key] ?? null)) changed[key] = v.value;
  }
  const command = useCommandText(changed, preset && !parent ? preset : null);

  // what the engine will use where it derives a value, and whether it takes the combination at all: ask it (POST
  // /config/validate, the server's own gate) once the edits pause
  const planBody = useMemo(() => parent ? { config: unflatten({ ...flatten(parent.resolved_config), ...changed }) as Record<string, unknown> }
    : { preset, config: unflatten(changed) as Record<string, unknown> }, [parent, preset, JSON.stringify(changed)]); // eslint-disable-line react-hooks/exhaustive-deps
  const settledBody = useDebounced(planBody, 300);
  const plan = useConfigPlan(settledBody, Object.keys(clientErrors).length === 0 && unread.length === 0);
  // a combination the engine refuses (e.g. a batch that does not split into mini-batches), shown as the user edits
  const live = useMemo(() => plan.error instanceof ApiError && plan.error.fieldErrors.length
    ? splitServerErrors(plan.error.fieldErrors, (key) => byKey.has(key)) : { atFields: {}, general: [] }, [plan.error, byKey]);
  const liveList = [...Object.entries(live.atFields).map(([k, m]) => `${k}: ${m}`), ...live.general];
  const planned = useMemo(() => plan.data ? flatten(plan.data.resolved_config) : null, [plan.data]);
  const plannedNote = (f: Field): string | undefined => {
    if (!planned || !/micro_batch_size_per_gpu$/.test(f.key) || !(f.key in planned)) return undefined;
    const use = planned[f.key];
    const v = valueFor(f);
    const gpuNote = planned["trainer.auto_micro_batch"] === true ? "; on a GPU, trainer.auto_micro_batch may size it from free memory instead" : "";
    if (!v.ok) return undefined;
    if (v.value === null || v.value === undefined) return `auto: the run uses ${String(use)}${gpuNote}`;
    if (!sameValue(v.value, use as HydraValue)) return `the run uses ${String(use)}: ${String(v.value)} is capped at the mini-batch each worker trains on${gpuNote}`;
    return gpuNote ? `the run uses ${String(use)}${gpuNote}` : undefined;
  };

  // no critic (GRPO, RLOO, ... : critic.enable unset and an estimator other than gae): its fields are noise here
  const current = (key: string) => {
    const f = byKey.get(key);
    const v = f ? valueFor(f) : null;
    return v && v.ok ? v.value : undefined;
  };
  const criticEnable = current("critic.enable");
  const estimator = current("algorithm.adv_estimator");
  const hasCritic = criticEnable === true || ((criticEnable === null || criticEnable === undefined) && estimator === "gae");
  const shown = (f: Field) => hasCritic || !f.key.startsWith("critic.") || f.key === "critic.enable" || f.key in edits;

  const setField = (key: string, raw: Raw) => {
    setEdits((e) => ({ ...e, [key]: raw }));
    setServerErrors(({ [key]: _drop, ...rest }) => rest);
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
        const { atFields, general } = splitServerErrors(e.fieldErrors, (key) => byKey.has(key));
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
    if (unread.length) return;  // the server is still reading a typed list: the button is disabled until it has
    submit.mutate();
  };

  const renderField = (f: Field) => (
    <FieldInput key={f.key} field={f} raw={rawFor(f)} changed={f.key in changed} planned={plannedNote(f)}
      error={clientErrors[f.key] ?? serverErrors[f.key] ?? live.atFields[f.key]} onChange={(raw) => setField(f.key, raw)} />
  );
  const shownGroups = groups.map((g) => ({ ...g, fields: g.fields.filter(shown) })).filter((g) => g.fields.length > 0);
  const filteredAdvanced = advanced.filter(shown).filter((f) => !advancedFilter || f.key.includes(advancedFilter) || f.description.toLowerCase().includes(advancedFilter.toLowerCase()));
  const sections = [...new Set(filteredAdvanced.map((f) => f.section))];
  const changedCount = Object.keys(changed).length;

  return (
    <form className="stack" onSubmit={onSubmit} noValidate aria-label="new run">
      <PageTitle actions={<Link to="/" className="button">Cancel</Link>}>
        {parent ? <>Fork of <Link to={`/runs/${parent.id}`}>{parent.name || `run ${parent.id}`}</Link></> : "New run"}
      </PageTitle>

      {!parent && <PresetPicker presetNames={presetNames} preset={preset} onPreset={(n) => onPreset(n)} />}

      <PasteSection text={paste.text} onText={paste.setText} report={paste.report} busy={paste.busy} error={paste.error}
        fork={parent !== null} onApply={(chosen) => void paste.apply(chosen)} />

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
        {!hasCritic && <p className="small muted" data-no-critic>No critic: {String(estimator)} takes its advantages from the
          rewards without a value model, so the critic's settings are hidden (critic.enable=true shows them).</p>}
        <div className="form-section">{essentials.filter(shown).map(renderField)}</div>
      </section>

      {shownGroups.map((g) => <FieldGroupCard key={g.name} group={g} renderField={renderField} />)}

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

      {liveList.length > 0 && Object.keys(serverErrors).length === 0 && (
        <div className="notice error" role="status" data-live-errors>
          The engine would refuse this config: {liveList.map((m, i) => <div key={i} className="mono small">{m}</div>)}
        </div>
      )}
      {generalErrors.length > 0 && <div className="notice error" role="alert">{generalErrors.map((g, i) => <div key={i}>{g}</div>)}</div>}
      {Object.keys(serverErrors).length > 0 && (
        <div className="notice error" role="alert">The server refused the config: see the highlighted field{Object.keys(serverErrors).length > 1 ? "s" : ""}.</div>
      )}

      <section className="card">
        <details>
          <summary className="small">As a command ({changedCount} key{changedCount === 1 ? "" : "s"} set on top of {parent ? "the parent run" : preset ? presetLabel(preset) : "the defaults"})</summary>
          <pre className="log-tail" aria-busy={command.isFetching}>{command.data?.command ?? ""}</pre>
        </details>
        <div className="row" style={{ marginTop: ".6rem" }}>
          <button type="submit" className="primary" disabled={submit.isPending || unread.length > 0}>{submit.isPending ? "Launching…" : parent ? "Launch fork" : "Launch run"}</button>
          {Object.keys(clientErrors).length > 0 && <span className="field-error">Fix the highlighted fields first.</span>}
        </div>
      </section>
    </form>
  );
}
