import { describe, expect, it } from "vitest";
import { formatValue, parseValue, toCommand } from "./verlCommand";

// A pasted command line is read by the server (POST /config/parse, tests/unit/test_config_command.py); what is
// left here reads and writes the form's own field values.
describe("values", () => {
  it("parses scalars", () => {
    expect(parseValue("True")).toBe(true);
    expect(parseValue("null")).toBe(null);
    expect(parseValue("1e-6")).toBe(1e-6);
    expect(parseValue("Qwen/Qwen2.5-0.5B")).toBe("Qwen/Qwen2.5-0.5B");
    expect(parseValue("'123'")).toBe("123");
    expect(parseValue("[]")).toEqual([]);
  });
  it("parses lists and dicts", () => {
    expect(parseValue("['console','file']")).toEqual(["console", "file"]);
    expect(parseValue("[1,2.5,null]")).toEqual([1, 2.5, null]);
    expect(parseValue("{a:1,b:'two'}")).toEqual({ a: 1, b: "two" });
  });
  it("formats and round-trips", () => {
    const values = { "a.lr": 1e-6, "t.logger": ["console", "file"], "m.path": "Qwen/Qwen2.5-0.5B", "x.s": "a b", "f": false, "n": null, "q": "123" };
    const cmd = toCommand(values);
    expect(cmd.startsWith("python -m engine.main_ppo")).toBe(true);
    for (const [k, v] of Object.entries(values)) {
      expect(parseValue(formatValue(v))).toEqual(v);
      expect(cmd).toContain(`${k}=`);
    }
    expect(formatValue("123")).toBe("'123'");
    // the engine's writer (engine/config/values.py) writes booleans so; both read True and true
    expect(formatValue(true)).toBe("true");
    expect(formatValue([false, null])).toBe("[false,null]");
  });
});
