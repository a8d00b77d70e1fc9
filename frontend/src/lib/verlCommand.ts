/**
 * Config values in verl's override syntax, for the form's own fields: `parseValue` reads what a user types into a
 * list or free-form field (`[a,'b',3]`, `{a:1}`, null, 1e-6), `formatValue`/`toCommand` write the form back out as
 * a command line ("copy as command"). A whole pasted command line is read by the server (POST /config/parse),
 * with the engine's own parser: usePaste in pages/new-run.
 */

export type HydraValue = null | boolean | number | string | HydraValue[] | { [key: string]: HydraValue };

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

/** Format a value back into override syntax (the inverse used for "copy as command"); writes what the engine's one
 * grammar writes (engine/config/values.py `format_value`: true/false, null, [a,b], {k:v}, 'quoted'). */
export function formatValue(value: HydraValue): string {
  if (value === null) return "null";
  if (typeof value === "boolean") return value ? "true" : "false";
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
