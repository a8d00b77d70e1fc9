/** Flatten nested configs to dotted keys and keep only the keys whose values differ between runs. */

export type Json = null | boolean | number | string | Json[] | { [key: string]: Json };

export function flatten(obj: unknown, prefix = "", out: Record<string, Json> = {}): Record<string, Json> {
  if (obj !== null && typeof obj === "object" && !Array.isArray(obj)) {
    const entries = Object.entries(obj as Record<string, unknown>);
    if (entries.length === 0 && prefix) out[prefix] = {};
    for (const [k, v] of entries) flatten(v, prefix ? `${prefix}.${k}` : k, out);
  } else if (prefix) {
    out[prefix] = obj as Json;
  }
  return out;
}

/** Inverse of flatten: {"a.b": 1} -> {a: {b: 1}}. */
export function unflatten(flat: Record<string, unknown>): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const [key, value] of Object.entries(flat)) {
    const parts = key.split(".");
    let node = out;
    for (const part of parts.slice(0, -1)) {
      if (node[part] === null || typeof node[part] !== "object" || Array.isArray(node[part])) node[part] = {};
      node = node[part] as Record<string, unknown>;
    }
    node[parts[parts.length - 1]] = value;
  }
  return out;
}

export function sameValue(a: unknown, b: unknown): boolean {
  return JSON.stringify(a) === JSON.stringify(b);
}

export interface DiffRow {
  key: string;
  values: (Json | undefined)[]; // one per config; undefined = the key is absent there
}

export function diffConfigs(configs: readonly unknown[]): DiffRow[] {
  const flats = configs.map((c) => flatten(c));
  const keys = new Set<string>();
  for (const f of flats) for (const k of Object.keys(f)) keys.add(k);
  const rows: DiffRow[] = [];
  for (const key of [...keys].sort()) {
    const values = flats.map((f) => (key in f ? f[key] : undefined));
    if (values.some((v) => !sameValue(v, values[0]))) rows.push({ key, values });
  }
  return rows;
}

export function formatJson(v: Json | undefined): string {
  if (v === undefined) return "—";
  if (typeof v === "string") return v;
  return JSON.stringify(v);
}
