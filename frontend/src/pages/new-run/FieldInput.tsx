/** One generated form field: the input fits the schema type; the verl key, help and errors sit beside it. */
import type { Field } from "../../lib/schemaForm";
import { ALGORITHM_LABELS } from "../../lib/schemaForm";

export type Raw = string | boolean | null;

interface Props {
  field: Field;
  raw: Raw;
  changed: boolean;
  error?: string;
  /** what the run will use where the engine derives it (a micro-batch's "auto" or capped value) */
  planned?: string;
  onChange: (raw: Raw) => void;
}

export function fieldDomId(key: string): string {
  return `field-${key.replace(/[^\w]/g, "-")}`;
}

export function FieldInput({ field, raw, changed, error, planned, onChange }: Props) {
  const id = fieldDomId(field.key);
  const describedBy = [field.description ? `${id}-help` : "", error ? `${id}-error` : ""].filter(Boolean).join(" ") || undefined;
  const common = { id, "aria-describedby": describedBy, "aria-invalid": error ? true : undefined, "data-key": field.key };
  let input;
  if (field.kind === "boolean" && !field.nullable) {
    input = <input type="checkbox" {...common} checked={raw === true} onChange={(e) => onChange(e.target.checked)} />;
  } else if (field.kind === "boolean") {
    input = (
      <select {...common} value={raw === null ? "" : String(raw)} onChange={(e) => onChange(e.target.value === "" ? null : e.target.value === "true")}>
        <option value="">auto (default)</option>
        <option value="true">true</option>
        <option value="false">false</option>
      </select>
    );
  } else if (field.kind === "enum") {
    input = (
      <select {...common} value={raw === null ? "" : String(raw)} onChange={(e) => onChange(e.target.value === "" ? null : e.target.value)}>
        {field.nullable && <option value="">(none)</option>}
        {field.options.map((o) => (
          <option key={o} value={o}>{field.key === "algorithm.adv_estimator" ? `${ALGORITHM_LABELS[o] ?? o} — ${o}` : o}</option>
        ))}
      </select>
    );
  } else {
    const numeric = field.kind === "integer" || field.kind === "number";
    const listId = field.suggestions.length ? `${id}-suggestions` : undefined;
    input = (
      <>
        <input {...common} type="text" inputMode={numeric ? "decimal" : undefined} spellCheck={false}
          value={raw === null ? "" : String(raw)} placeholder={field.nullable ? "(none)" : undefined}
          list={listId} onChange={(e) => onChange(e.target.value)} />
        {listId && <datalist id={listId}>{field.suggestions.map((s) => <option key={s} value={s} />)}</datalist>}
        {listId && (
          <span className="suggestions small" aria-label={`suggested values for ${field.label}`}>
            <span className="muted">built in:</span>
            {field.suggestions.map((s) => (
              <button key={s} type="button" className="link-button" aria-pressed={raw === s} data-suggestion={s}
                onClick={() => onChange(s)}>{s}</button>
            ))}
          </span>
        )}
      </>
    );
  }
  return (
    <div className={`field ${changed ? "changed" : ""} ${error ? "invalid" : ""}`} data-field={field.key}>
      <label htmlFor={id}>{field.label}{changed && <span className="badge neutral small" title="differs from the starting point">edited</span>}</label>
      <span className="key">{field.key}</span>
      {input}
      {planned && <span className="help planned" data-planned>{planned}</span>}
      {field.description && <span id={`${id}-help`} className="help">{field.description}</span>}
      {error && <span id={`${id}-error`} className="field-error" role="alert">{error}</span>}
    </div>
  );
}
