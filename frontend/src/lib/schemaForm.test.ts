import { describe, expect, it } from "vitest";
import { errorField, essentialsFirst, fieldsFromSchema, fromText, toText } from "./schemaForm";

const schema = {
  $defs: {
    Data: {
      type: "object",
      properties: {
        train_files: { anyOf: [{ type: "string" }, { type: "array", items: { type: "string" } }], default: "a.parquet", "x-essential": true },
        train_batch_size: { type: "integer", default: 1024, minimum: 1, description: "Prompts per step.", "x-essential": true },
        seed: { type: "integer", default: 1 },
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
      "data.train_files", "data.train_batch_size", "data.seed", "algorithm.adv_estimator",
      "algorithm.use_kl_in_reward", "algorithm.lr", "trainer.logger",
    ]);
    expect(byKey["data.train_files"]).toMatchObject({ kind: "string", acceptsList: true, essential: true });
    expect(byKey["algorithm.adv_estimator"]).toMatchObject({ kind: "enum", options: ["gae", "grpo"] });
    expect(byKey["algorithm.use_kl_in_reward"]).toMatchObject({ kind: "boolean", nullable: true });
    expect(byKey["trainer.logger"]).toMatchObject({ kind: "list", default: ["console"] });
    expect(byKey["data.train_batch_size"].description).toBe("Prompts per step.");
  });

  it("puts essentials first in the issue's order", () => {
    const { essentials, advanced } = essentialsFirst(fields);
    expect(essentials.map((f) => f.key)).toEqual(["data.train_files", "algorithm.adv_estimator", "data.train_batch_size", "algorithm.use_kl_in_reward"]);
    expect(advanced).toHaveLength(3);
  });

  it("coerces typed text and reports errors", () => {
    expect(fromText(byKey["algorithm.lr"], "1e-6")).toEqual({ ok: true, value: 1e-6 });
    expect(fromText(byKey["data.train_batch_size"], "0")).toEqual({ ok: false, error: "must be ≥ 1" });
    expect(fromText(byKey["data.train_batch_size"], "2.5").ok).toBe(false);
    expect(fromText(byKey["trainer.logger"], "console, file")).toEqual({ ok: true, value: ["console", "file"] });
    expect(fromText(byKey["data.train_files"], "[a.parquet, b.parquet]")).toEqual({ ok: true, value: ["a.parquet", "b.parquet"] });
    expect(fromText(byKey["algorithm.use_kl_in_reward"], "")).toEqual({ ok: true, value: null });
    expect(toText(byKey["trainer.logger"], ["console"])).toBe('["console"]');
  });

  it("maps a server 422 to a field", () => {
    expect(errorField({ loc: ["body", "config", "data", "train_batch_size"], field: "data.train_batch_size" })).toBe("data.train_batch_size");
    expect(errorField({ loc: ["body", "name"] })).toBe("name");
  });
});
