import { describe, expect, it } from "vitest";
import { errorOf, formData } from "./upload";

describe("the import upload", () => {
  it("puts each verl file under its field, and the tags one by one", () => {
    const form = formData("verl", {
      metrics: new File(["{}"], "metrics.jsonl"), config: new File(["a: 1"], "config.yaml"),
      rollout: [new File([""], "1.jsonl"), new File([""], "2.jsonl")], validation: [],
      events: [new File([""], "events.out.tfevents.1")],
    }, { experiment: " gsm8k ", name: "", tags: "verl, baseline,," });
    expect((form.get("metrics") as File).name).toBe("metrics.jsonl");
    expect((form.get("config") as File).name).toBe("config.yaml");
    expect(form.getAll("rollout").map((f) => (f as File).name)).toEqual(["1.jsonl", "2.jsonl"]);
    expect(form.getAll("validation")).toEqual([]);
    expect(form.getAll("events")).toEqual([]); // not a verl field
    expect(form.get("experiment")).toBe("gsm8k");
    expect(form.get("name")).toBeNull();
    expect(form.getAll("tags")).toEqual(["verl", "baseline"]);
  });

  it("sends TensorBoard's event files only", () => {
    const form = formData("tensorboard", { metrics: new File(["{}"], "m.jsonl"), events: [new File([""], "e1"), new File([""], "e2")] },
      { experiment: "", name: "tb", tags: "" });
    expect(form.getAll("events").length).toBe(2);
    expect(form.get("metrics")).toBeNull();
    expect(form.get("experiment")).toBeNull();
  });

  it("reads the server's 422: the field and the message naming the line", () => {
    const e = errorOf(422, JSON.stringify({ detail: [{ loc: ["body", "metrics"], msg: "m.jsonl line 7: not JSON", type: "file_invalid" }] }));
    expect(e.field).toBe("metrics");
    expect(e.message).toBe("m.jsonl line 7: not JSON");
    expect(errorOf(401, JSON.stringify({ detail: "Missing 'Authorization: Bearer <token>' header." })).message).toContain("Authorization");
    expect(errorOf(0, "").message).toBe("Cannot reach the server.");
    expect(errorOf(502, "<html>").message).toBe("The server answered 502.");
  });
});
