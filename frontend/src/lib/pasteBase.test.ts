import { describe, expect, it } from "vitest";
import { pasteBase, presetValuesNotSet } from "./pasteBase";

const presets = ["demo", "gsm8k_grpo"];
// the parts of a command the server reads (POST /config/parse) that pick the base
const whole = (configName: string | null = null) => ({ module: "verl.trainer.main_ppo", configName });
const snippet = { module: null, configName: null };

describe("pasteBase", () => {
  it("lays a whole verl command over verl's defaults, not the selected preset", () => {
    expect(pasteBase(whole(), "demo", presets)).toEqual({ base: null, why: "full-command" });
  });
  it("follows --config-name when it names a preset", () => {
    expect(pasteBase(whole("gsm8k_grpo"), "demo", presets)).toEqual({ base: "gsm8k_grpo", why: "config-name" });
  });
  it("lays bare key=value lines over the selected preset", () => {
    expect(pasteBase(snippet, "demo", presets)).toEqual({ base: "demo", why: "snippet" });
  });
  it("keeps the parent of a fork, and an explicit choice", () => {
    const parsed = whole();
    expect(pasteBase(parsed, null, presets, { fork: true }).why).toBe("fork");
    expect(pasteBase(parsed, "demo", presets, { chosen: "demo" })).toEqual({ base: "demo", why: "chosen" });
  });
});

describe("presetValuesNotSet", () => {
  it("lists the preset's own values that the command leaves in place", () => {
    const preset = { algorithm: { adv_estimator: "grpo" }, actor_rollout_ref: { rollout: { n: 8 } }, data: { train_batch_size: 32 }, trainer: { x: 1 } };
    const defaults = { "algorithm.adv_estimator": "gae", "actor_rollout_ref.rollout.n": 1, "data.train_batch_size": 1024, "trainer.x": 1 };
    const got = presetValuesNotSet(preset, ["data.train_batch_size"], defaults, (k) => k in defaults);
    expect(got).toEqual([["actor_rollout_ref.rollout.n", 8], ["algorithm.adv_estimator", "grpo"]]);
  });
});
