/** A server 422's details split into those shown at a form field and those shown above the submit button. */
import { errorField } from "../../lib/schemaForm";

/** Keys of the form's own inputs (name, tags, ...): their errors are shown without the key. */
const RUN_KEYS = ["name", "tags", "preset", "experiment_name"];

export function splitServerErrors(details: { loc?: (string | number)[]; field?: string | null; msg: string }[],
  isField: (key: string) => boolean): { atFields: Record<string, string>; general: string[] } {
  const atFields: Record<string, string> = {};
  const general: string[] = [];
  for (const d of details) {
    const key = errorField(d);
    if (isField(key)) atFields[key] = d.msg;
    else general.push(key && !RUN_KEYS.includes(key) ? `${key}: ${d.msg}` : d.msg);
  }
  return { atFields, general };
}
