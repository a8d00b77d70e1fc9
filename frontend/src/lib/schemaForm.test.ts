import { describe, expect, it } from "vitest";
import { errorField, essentialsFirst, fieldsFromSchema, fromText, grammarText, subsectionOf, toText } from "./schemaForm";

const schema = {
  $defs: {
    Data: {
      type: "object",
      properties: {
        train_files: { anyOf: [{ type: "string" }, { type: "array", items: { type: "string" } }], default: "a.parquet", "x-essential": true },
        train_batch_size: { type: "integer", default: 1024, minimum: 1, description: "Prompts per step.", "x-essential": true },
        seed: { type: "integer", default: 1 },
        model: { type: "string", default: "m", examples: ["builtin:smollm2-135m-instruct", 7] },
      },
    },
    Algo: {
      type: "object",
      properties: {
        adv_estimator: { type: "string", enum: ["gae", "grpo"], default: "gae", "x-essential": true },
        use_kl_in_reward: { anyOf: [{ type: "boolean" }, { type: "null" }], default: null },
        lr: { type: "number", default: 1e-6 },
      },
    },
  },
  type: "object",
  properties: {
    data: { $ref: "#/$defs/Data" },
    algorithm: { $ref: "#/$defs/Algo" },
    trainer: { type: "object", properties: { logger: { type: "array", items: { type: "string" }, default: ["console"] } } },
  },
};

describe("schemaForm", () => {
  const fields = fieldsFromSchema(schema);
  const byKey = Object.fromEntries(fields.map((f) => [f.key, f]));

  it("flattens the schema into dotted verl keys with kinds", () => {
    expect(fields.map((f) => f.key)).toEqual([
      "data.train_files", "data.train_batch_size", "data.seed", "data.model", "algorithm.adv_estimator",
      "algorithm.use_kl_in_reward", "algorithm.lr", "trainer.logger",
    ]);
    expect(byKey["data.train_files"]).toMatchObject({ kind: "string", acceptsList: true, essential: true });
    expect(byKey["algorithm.adv_estimator"]).toMatchObject({ kind: "enum", options: ["gae", "grpo"] });
    expect(byKey["algorithm.use_kl_in_reward"]).toMatchObject({ kind: "boolean", nullable: true });
    expect(byKey["trainer.logger"]).toMatchObject({ kind: "list", default: ["console"] });
    expect(byKey["data.train_batch_size"].description).toBe("Prompts per step.");
    // the schema's string "examples" become the field's suggestions (the built-in models a path can name)
    expect(byKey["data.model"].suggestions).toEqual(["builtin:smollm2-135m-instruct"]);
    expect(byKey["data.seed"].suggestions).toEqual([]);
  });

  it("puts essentials first in the issue's order", () => {
    const { essentials, advanced } = essentialsFirst(fields);
    expect(essentials.map((f) => f.key)).toEqual(["data.train_files", "algorithm.adv_estimator", "data.train_batch_size", "algorithm.use_kl_in_reward"]);
    expect(advanced).toHaveLength(4);
  });

  it("coerces typed text and reports errors", () => {
    expect(fromText(byKey["algorithm.lr"], "1e-6")).toEqual({ ok: true, value: 1e-6 });
    expect(fromText(byKey["data.train_batch_size"], "0")).toEqual({ ok: false, error: "must be ≥ 1" });
    expect(fromText(byKey["data.train_batch_size"], "2.5").ok).toBe(false);
    // a list not written as JSON is the engine's grammar to read (the server's, POST /config/values): pending till then
    const logger = byKey["trainer.logger"];
    expect(grammarText(logger, "console, file")).toBe("[console, file]");
    expect(fromText(logger, "console, file")).toMatchObject({ ok: false, pending: true });
    const read = (t: string) => (t === "[console, file]" ? ["console", "file"] : t === "[x]" ? "x" : undefined);
    expect(fromText(logger, "console, file", read)).toEqual({ ok: true, value: ["console", "file"] });
    expect(fromText(logger, "x", read)).toEqual({ ok: false, error: "expected a list like [a, b]" });
    expect(grammarText(logger, '["console"]')).toBeNull();  // JSON is read here
    expect(fromText(logger, '["console"]')).toEqual({ ok: true, value: ["console"] });
    expect(grammarText(byKey["data.train_files"], "[a.parquet, b.parquet]")).toBe("[a.parquet, b.parquet]");
    expect(grammarText(byKey["data.train_files"], "~/data/train.parquet")).toBeNull();
    expect(fromText(byKey["algorithm.use_kl_in_reward"], "")).toEqual({ ok: true, value: null });
    expect(toText(byKey["trainer.logger"], ["console"])).toBe('["console"]');
  });

  it("maps a server 422 to a field", () => {
    expect(errorField({ loc: ["body", "config", "data", "train_batch_size"], field: "data.train_batch_size" })).toBe("data.train_batch_size");
    expect(errorField({ loc: ["body", "name"] })).toBe("name");
  });
});

describe("schemaForm groups (x-group)", () => {
  const lora = (extra: object) => ({ "x-group": "LoRA", ...extra });
  const grouped = {
    $defs: {
      Model: {
        type: "object",
        properties: {
          path: { type: "string", default: "m", "x-essential": true },
          lora_rank: lora({ type: "integer", default: 0, minimum: 0 }),
          target_modules: lora({ anyOf: [{ type: "string" }, { type: "array", items: { type: "string" } }], default: "all-linear" }),
          use_liger: { type: "boolean", default: false },
        },
      },
      Critic: { type: "object", properties: { model: { type: "object", properties: { lora_rank: lora({ type: "integer", default: 0 }) } } } },
    },
    type: "object",
    properties: {
      actor_rollout_ref: { type: "object", properties: { model: { $ref: "#/$defs/Model" } } },
      critic: { $ref: "#/$defs/Critic" },
      trainer: { type: "object", properties: { seed: { type: "integer", default: 1, "x-group": "LoRA", "x-essential": true } } },
    },
  };
  const fields = fieldsFromSchema(grouped);

  it("gives an x-group's fields a group of their own, in schema order, out of Advanced", () => {
    const { essentials, groups, advanced } = essentialsFirst(fields);
    expect(groups.map((g) => g.name)).toEqual(["LoRA"]);
    expect(groups[0].fields.map((f) => f.key)).toEqual([
      "actor_rollout_ref.model.lora_rank", "actor_rollout_ref.model.target_modules", "critic.model.lora_rank",
    ]);
    expect(groups[0].fields.map(subsectionOf)).toEqual(["actor_rollout_ref.model", "actor_rollout_ref.model", "critic.model"]);
    // an essential stays with the essentials whatever its group
    expect(essentials.map((f) => f.key)).toEqual(["actor_rollout_ref.model.path", "trainer.seed"]);
    expect(advanced.map((f) => f.key)).toEqual(["actor_rollout_ref.model.use_liger"]);
  });

  it("labels LoRA keys readably and keeps their types", () => {
    const byKey = Object.fromEntries(fields.map((f) => [f.key, f]));
    expect(byKey["critic.model.lora_rank"]).toMatchObject({ label: "LoRA rank", kind: "integer", group: "LoRA" });
    expect(byKey["actor_rollout_ref.model.target_modules"]).toMatchObject({ label: "Target modules", acceptsList: true });
    expect(grammarText(byKey["actor_rollout_ref.model.target_modules"], "[q_proj, v_proj]")).toBe("[q_proj, v_proj]");
    expect(fromText(byKey["actor_rollout_ref.model.target_modules"], "all-linear")).toEqual({ ok: true, value: "all-linear" });
    expect(byKey["actor_rollout_ref.model.use_liger"].group).toBeNull();
  });
});
