/**
 * Parse a pasted verl command line (`python -m verl.trainer.main_ppo key=value ...`) into config values.
 * Hydra override grammar, the parts people actually paste: `key=value`, `+key=value` (add), `++key=value`
 * (add or override), `~key` / `~key=value` (delete); values are null, booleans, numbers (1e-6), lists
 * `[a,'b',3]`, dicts `{a:1}`, quoted or bare strings. Shell wrapping is undone first: backslash-newline
 * continuations, quotes, leading `VAR=value` environment assignments, and trailing `| tee log`, `2>&1`, `> f`.
 */

export type HydraValue = null | boolean | number | string | HydraValue[] | { [key: string]: HydraValue };

export type OverrideOp = "set" | "add" | "force" | "delete";

export interface Override {
  op: OverrideOp;
  key: string;
  value: HydraValue | undefined; // undefined only for a bare `~key`
  raw: string;
}

export interface ParsedCommand {
  module: string | null;
  configName: string | null;
  env: Record<string, string>;
  overrides: Override[];
  /** key -> value for set/add/force overrides, in order (a later one wins). */
  values: Record<string, HydraValue>;
  deleted: string[];
  /** tokens that are neither the program, its flags nor overrides */
  ignored: string[];
}

/** Split like a POSIX shell would (quotes removed, backslash escapes), stopping at a pipe/redirect/`;`/`&&`. */
export function shellSplit(text: string): string[] {
  const src = text.replace(/\\\r?\n/g, " ");
  const out: string[] = [];
  let cur = "";
  let inToken = false;
  let i = 0;
  const push = () => {
    if (inToken) out.push(cur);
    cur = "";
    inToken = false;
  };
  while (i < src.length) {
    const c = src[i];
    if (c === "'") {
      const end = src.indexOf("'", i + 1);
      const stop = end === -1 ? src.length : end;
      cur += src.slice(i + 1, stop);
      inToken = true;
      i = stop + 1;
      continue;
    }
    if (c === '"') {
      i += 1;
      while (i < src.length && src[i] !== '"') {
        if (src[i] === "\\" && i + 1 < src.length && '"\\$`'.includes(src[i + 1])) {
          cur += src[i + 1];
          i += 2;
        } else {
          cur += src[i];
          i += 1;
        }
      }
      i += 1;
      inToken = true;
      continue;
    }
    if (c === "\\" && i + 1 < src.length) {
      cur += src[i + 1];
      inToken = true;
      i += 2;
      continue;
    }
    if (c === "#" && !inToken) break; // a comment
    if (/\s/.test(c)) {
      push();
      i += 1;
      continue;
    }
    if (c === "|" || c === ";" || c === ">" || c === "<" || (c === "&" && !inToken)) {
      // `2>&1`, `> file`, `| tee`, `; echo`, `&& ...`: the command ends here
      if (c === ">" && inToken && /^\d+$/.test(cur)) {
        cur = "";
        inToken = false;
      }
      push();
      break;
    }
    cur += c;
    inToken = true;
    i += 1;
  }
  push();
  return out;
}

/** Parse one Hydra value (the part after `=`). */
export function parseValue(text: string): HydraValue {
  const p = new ValueParser(text.trim());
  const value = p.value();
  p.skipSpace();
  if (!p.done()) return text.trim(); // not a clean structured value: keep the text
  return value;
}

const NUMBER = /^[+-]?(\d+(_\d+)*(\.\d*)?|\.\d+)([eE][+-]?\d+)?$/;

function scalar(text: string): HydraValue {
  const t = text.trim();
  const lower = t.toLowerCase();
  if (lower === "null" || lower === "none" || t === "~") return null;
  if (lower === "true") return true;
  if (lower === "false") return false;
  if (lower === "inf" || lower === "+inf") return Infinity;
  if (lower === "-inf") return -Infinity;
  if (NUMBER.test(t)) return Number(t.replace(/_/g, ""));
  return t;
}

class ValueParser {
  i = 0;
  constructor(readonly s: string) {}
  done() {
    return this.i >= this.s.length;
  }
  skipSpace() {
    while (!this.done() && /\s/.test(this.s[this.i])) this.i += 1;
  }
  value(): HydraValue {
    this.skipSpace();
    const c = this.s[this.i];
    if (c === "[") return this.list();
    if (c === "{") return this.dict();
    if (c === "'" || c === '"') return this.quoted();
    return this.bare(false);
  }
  quoted(): string {
    const q = this.s[this.i];
    this.i += 1;
    let out = "";
    while (!this.done() && this.s[this.i] !== q) {
      if (this.s[this.i] === "\\" && this.i + 1 < this.s.length) {
        out += this.s[this.i + 1];
        this.i += 2;
      } else {
        out += this.s[this.i];
        this.i += 1;
      }
    }
    this.i += 1;
    return out;
  }
  bare(inside: boolean): HydraValue {
    const start = this.i;
    while (!this.done()) {
      const c = this.s[this.i];
      if (inside && (c === "," || c === "]" || c === "}" || c === ":")) break;
      this.i += 1;
    }
    return scalar(this.s.slice(start, this.i));
  }
  element(): HydraValue {
    this.skipSpace();
    const c = this.s[this.i];
    if (c === "[") return this.list();
    if (c === "{") return this.dict();
    if (c === "'" || c === '"') return this.quoted();
    return this.bare(true);
  }
  list(): HydraValue[] {
    this.i += 1;
    const out: HydraValue[] = [];
    this.skipSpace();
    if (this.s[this.i] === "]") {
      this.i += 1;
      return out;
    }
    while (!this.done()) {
      out.push(this.element());
      this.skipSpace();
      const c = this.s[this.i];
      this.i += 1;
      if (c === "]") return out;
      if (c !== ",") throw new Error("bad list");
    }
    return out;
  }
  dict(): { [key: string]: HydraValue } {
    this.i += 1;
    const out: { [key: string]: HydraValue } = {};
    this.skipSpace();
    if (this.s[this.i] === "}") {
      this.i += 1;
      return out;
    }
    while (!this.done()) {
      this.skipSpace();
      const key = String(this.s[this.i] === "'" || this.s[this.i] === '"' ? this.quoted() : this.bare(true)).trim();
      this.skipSpace();
      if (this.s[this.i] !== ":") throw new Error("bad dict");
      this.i += 1;
      out[key] = this.element();
      this.skipSpace();
      const c = this.s[this.i];
      this.i += 1;
      if (c === "}") return out;
      if (c !== ",") throw new Error("bad dict");
    }
    return out;
  }
}

function safeParseValue(text: string): HydraValue {
  try {
    return parseValue(text);
  } catch {
    return text;
  }
}

/** verl 0.9's spelling -> canonical key, as the server's JSON Schema lists them (`x-verl-aliases`); an entry ending
 * with "." maps a whole prefix. The engine accepts both layouts; the form shows the canonical one. */
export type Aliases = [string, string][];

export function aliasesFromSchema(schema: unknown): Aliases {
  const list = (schema as { "x-verl-aliases"?: unknown } | null)?.["x-verl-aliases"];
  return Array.isArray(list) ? (list.filter((p) => Array.isArray(p) && p.length === 2) as Aliases) : [];
}

export function canonicalKey(key: string, aliases: Aliases): string {
  for (const [old, canon] of aliases) {
    if (key === old) return canon;
    if (old.endsWith(".") && key.startsWith(old)) return canon + key.slice(old.length);
    if (key.startsWith(old + ".")) return canon + key.slice(old.length);
  }
  return key;
}

const OVERRIDE = /^(\+\+|\+|~)?([A-Za-z_][\w\-]*(?:\.[\w\-]+)*)(?:=(.*))?$/s;
const ENV = /^[A-Za-z_][A-Za-z0-9_]*=/;

export function parseCommand(text: string, aliases: Aliases = []): ParsedCommand {
  const tokens = shellSplit(text);
  const result: ParsedCommand = {
    module: null, configName: null, env: {}, overrides: [], values: {}, deleted: [], ignored: [],
  };
  let i = 0;
  // leading environment assignments (`PYTHONUNBUFFERED=1`) and launchers (`env`, `python3`, `ray job submit ... --`)
  for (; i < tokens.length; i++) {
    const t = tokens[i];
    if (ENV.test(t) && !t.includes(".") && /^[A-Z_][A-Z0-9_]*=/.test(t)) {
      const eq = t.indexOf("=");
      result.env[t.slice(0, eq)] = t.slice(eq + 1);
      continue;
    }
    break;
  }
  const dashdash = tokens.indexOf("--", i);
  if (dashdash !== -1 && tokens.slice(i, dashdash).some((t) => t === "ray" || t === "submit")) i = dashdash + 1;
  for (; i < tokens.length; i++) {
    const t = tokens[i];
    if (t === "env" || /(^|\/)python[\d.]*$/.test(t) || t === "uv" || t === "run") continue;
    if (t === "-m" && i + 1 < tokens.length) {
      result.module = tokens[i + 1];
      i += 1;
      continue;
    }
    if (t.startsWith("-")) {
      // --config-name demo / --config-name=demo / --config-path x / -u
      const [flag, inline] = t.includes("=") ? [t.slice(0, t.indexOf("=")), t.slice(t.indexOf("=") + 1)] : [t, null];
      const takesValue = ["--config-name", "-cn", "--config-path", "-cp", "--config-dir", "-cd"].includes(flag);
      const value = inline ?? (takesValue && i + 1 < tokens.length ? tokens[++i] : null);
      if (flag === "--config-name" || flag === "-cn") result.configName = value;
      continue;
    }
    if (/\.py$/.test(t) && result.module === null && !t.includes("=")) {
      result.module = t;
      continue;
    }
    const m = OVERRIDE.exec(t);
    if (!m) {
      result.ignored.push(t);
      continue;
    }
    const [, prefix, spelled, rawValue] = m;
    const key = canonicalKey(spelled, aliases);
    if (prefix === "~") {
      const value = rawValue === undefined ? undefined : safeParseValue(rawValue);
      result.overrides.push({ op: "delete", key, value, raw: t });
      result.deleted.push(key);
      delete result.values[key];
      continue;
    }
    if (rawValue === undefined) {
      result.ignored.push(t);
      continue;
    }
    const value = safeParseValue(rawValue);
    const op: OverrideOp = prefix === "++" ? "force" : prefix === "+" ? "add" : "set";
    result.overrides.push({ op, key, value, raw: t });
    result.values[key] = value;
  }
  return result;
}

/** Format a value back into override syntax (the inverse used for "copy as command"). */
export function formatValue(value: HydraValue): string {
  if (value === null) return "null";
  if (typeof value === "boolean") return value ? "True" : "False";
  if (typeof value === "number") {
    if (value === Infinity) return "inf";
    if (value === -Infinity) return "-inf";
    return String(value);
  }
  if (Array.isArray(value)) return `[${value.map(formatValue).join(",")}]`;
  if (typeof value === "object") {
    return `{${Object.entries(value).map(([k, v]) => `${k}:${formatValue(v)}`).join(",")}}`;
  }
  const s = String(value);
  const plain = /^[\w./:@$-]*$/.test(s) && scalar(s) === s && s !== "";
  return plain ? s : `'${s.replace(/\\/g, "\\\\").replace(/'/g, "\\'")}'`;
}

export function toCommand(values: Record<string, HydraValue>, module = "engine.main_ppo"): string {
  const lines = Object.entries(values).map(([k, v]) => `    ${shellQuote(`${k}=${formatValue(v)}`)}`);
  return [`python -m ${module}`, ...lines].join(" \\\n");
}

function shellQuote(token: string): string {
  return /^[\w./:@=+,-]+$/.test(token) ? token : `"${token.replace(/(["\\$`])/g, "\\$1")}"`;
}
