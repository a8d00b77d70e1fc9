/**
 * The New-run form is generated from the engine's run-config JSON Schema (pydantic): this module turns the
 * schema into a flat list of fields (dotted verl keys), and converts what a user types into typed values.
 */
import type { HydraValue } from "./hydraValue";

type Schema = {
  $ref?: string;
  $defs?: Record<string, Schema>;
  type?: string | string[];
  properties?: Record<string, Schema>;
  anyOf?: Schema[];
  allOf?: Schema[];
  items?: Schema;
  enum?: unknown[];
  const?: unknown;
  default?: unknown;
  title?: string;
  description?: string;
  minimum?: number;
  maximum?: number;
  exclusiveMinimum?: number;
  additionalProperties?: boolean | Schema;
  "x-essential"?: boolean;
  "x-group"?: string;
  examples?: unknown[];
};

export type FieldKind = "boolean" | "integer" | "number" | "string" | "enum" | "list" | "json";

export interface Field {
  key: string; // dotted verl key, e.g. actor_rollout_ref.actor.optim.lr
  section: string; // top-level key, e.g. actor_rollout_ref
  label: string;
  description: string;
  kind: FieldKind;
  nullable: boolean;
  /** string fields that also accept a list (data.train_files) */
  acceptsList: boolean;
  options: string[]; // for enums
  /** the schema's "examples" (e.g. the built-in models a model path can name): offered as suggestions */
  suggestions: string[];
  default: HydraValue | undefined;
  essential: boolean;
  /** the schema's "x-group": the form gives the group's fields a card of their own (e.g. LoRA) */
  group: string | null;
  minimum?: number;
  maximum?: number;
}

/** The order essentials appear in (the list); essentials not named here follow in schema order. */
export const ESSENTIAL_ORDER = [
  "actor_rollout_ref.model.path",
  "data.train_files",
  "data.val_files",
  "algorithm.adv_estimator",
  "data.train_batch_size",
  "actor_rollout_ref.rollout.n",
  "data.max_prompt_length",
  "data.max_response_length",
  "actor_rollout_ref.actor.optim.lr",
  "critic.optim.lr",
  "actor_rollout_ref.actor.use_kl_loss",
  "actor_rollout_ref.actor.kl_loss_coef",
  "algorithm.use_kl_in_reward",
  "algorithm.kl_ctrl.kl_coef",
  "trainer.total_epochs",
  "trainer.total_training_steps",
  "actor_rollout_ref.rollout.name",
  "trainer.n_gpus_per_node",
  "trainer.nnodes",
];

export const ALGORITHM_LABELS: Record<string, string> = {
  gae: "PPO (GAE, with a critic)",
  grpo: "GRPO",
  rloo: "RLOO",
  reinforce_plus_plus: "REINFORCE++",
  reinforce_plus_plus_baseline: "REINFORCE++ (baseline)",
  remax: "ReMax",
};

function resolve(node: Schema, root: Schema): Schema {
  let n = node;
  for (let guard = 0; guard < 10; guard++) {
    if (n.$ref) {
      const name = n.$ref.split("/").pop()!;
      const { $ref: _ref, ...rest } = n;
      n = { ...root.$defs?.[name], ...rest };
      continue;
    }
    if (n.allOf && n.allOf.length === 1) {
      const { allOf, ...rest } = n;
      n = { ...resolve(allOf[0], root), ...rest };
      continue;
    }
    break;
  }
  return n;
}

function isObject(n: Schema): boolean {
  return (n.type === "object" || n.properties !== undefined) && n.properties !== undefined && Object.keys(n.properties).length > 0;
}

/** Readable names for the essentials; every other field shows its key's last part in words. */
export const LABELS: Record<string, string> = {
  "actor_rollout_ref.model.path": "Model path",
  "data.train_files": "Training data",
  "data.val_files": "Validation data",
  "algorithm.adv_estimator": "Algorithm",
  "data.train_batch_size": "Prompts per step",
  "actor_rollout_ref.rollout.n": "Samples per prompt",
  "data.max_prompt_length": "Max prompt length (tokens)",
  "data.max_response_length": "Max response length (tokens)",
  "actor_rollout_ref.actor.optim.lr": "Actor learning rate",
  "critic.optim.lr": "Critic learning rate",
  "actor_rollout_ref.actor.use_kl_loss": "KL loss in the actor",
  "actor_rollout_ref.actor.kl_loss_coef": "KL loss coefficient",
  "algorithm.use_kl_in_reward": "KL penalty in the reward",
  "algorithm.kl_ctrl.kl_coef": "KL reward coefficient",
  "trainer.total_epochs": "Epochs",
  "trainer.total_training_steps": "Training steps (overrides epochs)",
  "actor_rollout_ref.rollout.name": "Rollout backend",
  "trainer.n_gpus_per_node": "GPUs per node",
  "trainer.nnodes": "Nodes",
  "actor_rollout_ref.actor.ppo_mini_batch_size": "PPO mini-batch (prompts)",
  "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": "Micro-batch per GPU",
};

function labelOf(key: string): string {
  if (LABELS[key]) return LABELS[key];
  const parts = key.split(".");
  const last = parts[parts.length - 1];
  const words = (last.length <= 3 && parts.length > 1 ? `${parts[parts.length - 2]} ${last}` : last).replace(/_/g, " ")
    .replace(/\blora\b/g, "LoRA");
  return words.charAt(0).toUpperCase() + words.slice(1);
}

export function fieldsFromSchema(root: Schema): Field[] {
  const out: Field[] = [];
  const walk = (raw: Schema, path: string[]) => {
    const node = resolve(raw, root);
    if (isObject(node)) {
      for (const [k, child] of Object.entries(node.properties!)) walk(child, [...path, k]);
      return;
    }
    const variants = (node.anyOf ?? [node]).map((v) => resolve(v, root));
    const nullable = variants.some((v) => v.type === "null");
    const real = variants.filter((v) => v.type !== "null");
    const types = new Set(real.map((v) => (v.enum ? "enum" : Array.isArray(v.type) ? "json" : v.type ?? "json")));
    let kind: FieldKind;
    let acceptsList = false;
    if (types.size === 1) {
      const t = [...types][0];
      kind = t === "array" ? "list" : t === "object" ? "json"
        : (["boolean", "integer", "number", "string", "enum"] as string[]).includes(t) ? (t as FieldKind) : "json";
    } else if (types.size === 2 && types.has("string") && types.has("array")) {
      kind = "string";
      acceptsList = true;
    } else if (types.size === 2 && types.has("integer") && types.has("number")) {
      kind = "number";
    } else kind = "json";
    const enumNode = real.find((v) => v.enum);
    const numeric = real.find((v) => v.minimum !== undefined || v.maximum !== undefined || v.exclusiveMinimum !== undefined);
    const key = path.join(".");
    out.push({
      key,
      section: path[0],
      label: labelOf(key),
      description: node.description ?? "",
      kind,
      nullable,
      acceptsList,
      options: enumNode ? enumNode.enum!.map(String) : [],
      suggestions: (node.examples ?? []).filter((x): x is string => typeof x === "string"),
      default: node.default as HydraValue | undefined,
      essential: Boolean(node["x-essential"]),
      group: node["x-group"] ?? null,
      minimum: numeric?.minimum ?? numeric?.exclusiveMinimum,
      maximum: numeric?.maximum,
    });
  };
  walk(root, []);
  return out;
}

export interface FieldGroup {
  name: string;
  fields: Field[];
}

/** The form's layout: the essentials (in ESSENTIAL_ORDER), then one group per schema "x-group" (in schema order, its
 * fields in schema order), then everything else ("Advanced"). An essential stays an essential whatever its group. */
export function essentialsFirst(fields: Field[]): { essentials: Field[]; groups: FieldGroup[]; advanced: Field[] } {
  const rank = (f: Field) => {
    const i = ESSENTIAL_ORDER.indexOf(f.key);
    return i === -1 ? ESSENTIAL_ORDER.length : i;
  };
  const essentials = fields.filter((f) => f.essential || ESSENTIAL_ORDER.includes(f.key));
  essentials.sort((a, b) => rank(a) - rank(b));
  const groups: FieldGroup[] = [];
  for (const f of fields) {
    if (!f.group || essentials.includes(f)) continue;
    const group = groups.find((g) => g.name === f.group);
    if (group) group.fields.push(f);
    else groups.push({ name: f.group, fields: [f] });
  }
  const advanced = fields.filter((f) => !essentials.includes(f) && !f.group);
  return { essentials, groups, advanced };
}

/** The object a field belongs to ("actor_rollout_ref.model" for actor_rollout_ref.model.lora_rank): a group's
 * sub-heading, which tells apart the same name under two roles. */
export function subsectionOf(field: Field): string {
  return field.key.split(".").slice(0, -1).join(".");
}

/** Render a value into the text a user edits (lists as `[a, b]`, null as empty). */
export function toText(field: Field, value: HydraValue | undefined): string {
  if (value === undefined || value === null) return "";
  if (field.kind === "list" || field.kind === "json" || (typeof value === "object" && value !== null)) {
    return JSON.stringify(value);
  }
  return String(value);
}

/** Typed value, an error that names what was expected, or `pending` while the server reads the text (a list or a
 *  free-form value not written as JSON: the engine's grammar reads those, see `grammarText`). */
export type Coerced = { ok: true; value: HydraValue } | { ok: false; error: string; pending?: true };

/** How the engine's override grammar read a text (the server's answer), undefined until it has answered. */
export type GrammarRead = (text: string) => HydraValue | undefined;

const SCALAR_KINDS = new Set(["integer", "number", "boolean", "enum", "string"]);

function json(text: string): HydraValue | undefined {
  try {
    return JSON.parse(text) as HydraValue;
  } catch {
    return undefined;
  }
}

/** The text a field's value is read from: a list field's bare `a, b` goes in brackets. */
function valueText(field: Field, t: string): string {
  return field.kind === "list" && !t.startsWith("[") ? `[${t}]` : t;
}

/** The text the engine's grammar must read for this field's value (`[a, b]`, `{k: v}`, bare words), or null when
 *  the browser can take it as it is (numbers, booleans, plain strings, JSON). */
export function grammarText(field: Field, text: string): string | null {
  const t = text.trim();
  const pathList = field.kind === "string" && field.acceptsList && t.startsWith("[");
  if (t === "" || (SCALAR_KINDS.has(field.kind) && !pathList)) return null;
  const v = valueText(field, t);
  return json(v) === undefined ? v : null;
}

const PENDING: Coerced = { ok: false, error: "", pending: true };

/** Typed value from what the user typed; errors name what was expected. `read` is the server's reading of the
 *  texts `grammarText` names (without it, such a text stays pending). */
export function fromText(field: Field, text: string, read: GrammarRead = () => undefined): Coerced {
  const t = text.trim();
  const typed = (): HydraValue | undefined => {
    const asked = grammarText(field, text);
    return asked === null ? json(valueText(field, t)) : read(asked);
  };
  if (t === "") {
    if (field.nullable) return { ok: true, value: null };
    if (field.kind === "string") return { ok: true, value: "" };
    return { ok: false, error: "required" };
  }
  switch (field.kind) {
    case "integer": {
      const n = Number(t);
      if (!Number.isInteger(n)) return { ok: false, error: "expected an integer" };
      return checkRange(field, n);
    }
    case "number": {
      const n = Number(t);
      if (!Number.isFinite(n)) return { ok: false, error: "expected a number (e.g. 1e-6)" };
      return checkRange(field, n);
    }
    case "boolean":
      return { ok: true, value: t === "true" };
    case "enum":
      return field.options.includes(t) ? { ok: true, value: t } : { ok: false, error: `one of ${field.options.join(", ")}` };
    case "string":
      if (field.acceptsList && t.startsWith("[")) {
        const v = typed();
        if (v === undefined) return PENDING;
        return Array.isArray(v) ? { ok: true, value: v.map(String) } : { ok: false, error: "expected a path or a [list, of, paths]" };
      }
      return { ok: true, value: text };
    case "list": {
      const v = typed();
      if (v === undefined) return PENDING;
      return Array.isArray(v) ? { ok: true, value: v } : { ok: false, error: "expected a list like [a, b]" };
    }
    default: {
      const v = typed();
      return v === undefined ? PENDING : { ok: true, value: v };
    }
  }
}

function checkRange(field: Field, n: number): Coerced {
  if (field.minimum !== undefined && n < field.minimum) return { ok: false, error: `must be ≥ ${field.minimum}` };
  if (field.maximum !== undefined && n > field.maximum) return { ok: false, error: `must be ≤ ${field.maximum}` };
  return { ok: true, value: n };
}

/** The field a server 422 points at: `loc` = ["body", "config", ...path] or a `field` with a dotted key. */
export function errorField(detail: { loc?: (string | number)[]; field?: string | null }): string {
  if (detail.field) return detail.field;
  const loc = (detail.loc ?? []).map(String);
  if (loc[0] === "body") loc.shift();
  if (loc[0] === "config") loc.shift();
  return loc.join(".");
}
