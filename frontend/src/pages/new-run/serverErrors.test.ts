import { describe, expect, it } from "vitest";
import { splitServerErrors } from "./serverErrors";

describe("splitServerErrors", () => {
  it("puts config keys at their field and the rest above the button", () => {
    const out = splitServerErrors([
      { loc: ["body", "config", "data", "train_batch_size"], msg: "too small" },
      { loc: ["body", "name"], msg: "taken" },
      { loc: ["body", "config", "nope"], msg: "unknown key" },
      { field: "trainer.total_epochs", msg: "must be > 0" },
    ], (k) => k === "data.train_batch_size" || k === "trainer.total_epochs");
    expect(out.atFields).toEqual({ "data.train_batch_size": "too small", "trainer.total_epochs": "must be > 0" });
    expect(out.general).toEqual(["taken", "nope: unknown key"]);
  });
});
