/** A form field's text/checkbox value ("raw") to and from the config value it stands for. */
import type { HydraValue } from "../../lib/hydraValue";
import { type Coerced, fromText, type GrammarRead, grammarText, toText, type Field } from "../../lib/schemaForm";
import type { Raw } from "./FieldInput";

export function rawOf(field: Field, value: HydraValue | undefined): Raw {
  if (field.kind === "boolean") return value === null || value === undefined ? (field.nullable ? null : false) : Boolean(value);
  if (field.kind === "enum") return value === null || value === undefined ? null : String(value);
  return toText(field, value);
}

export function valueOf(field: Field, raw: Raw, read?: GrammarRead): Coerced {
  if (field.kind === "boolean") return { ok: true, value: raw === null ? null : Boolean(raw) };
  if (field.kind === "enum") return raw === null ? { ok: true, value: null } : fromText(field, String(raw));
  return fromText(field, raw === null ? "" : String(raw), read);
}

/** The text of this field the engine's grammar must read (see schemaForm's `grammarText`), or null. */
export function grammarTextOf(field: Field, raw: Raw): string | null {
  return field.kind === "boolean" || field.kind === "enum" || raw === null ? null : grammarText(field, String(raw));
}
