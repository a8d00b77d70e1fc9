import { afterEach, describe, expect, it, vi } from "vitest";
import { openEventStream, parseEventData, stateAfterError, type LiveState } from "./live";

describe("parseEventData", () => {
  it("parses JSON and passes on what does not parse as text or null", () => {
    expect(parseEventData('{"a":1}')).toEqual({ a: 1 });
    expect(parseEventData("not json")).toBe("not json");
    expect(parseEventData("not json", "null")).toBeNull();
  });
});

describe("stateAfterError", () => {
  it("is reconnecting unless the browser gave up", () => {
    expect(stateAfterError(0)).toBe("reconnecting");
    expect(stateAfterError(1)).toBe("reconnecting");
    expect(stateAfterError(2)).toBe("off");
  });
});

class FakeSource {
  static last: FakeSource;
  readyState = 0;
  closed = false;
  onopen: (() => void) | null = null;
  onerror: (() => void) | null = null;
  listeners = new Map<string, (e: { data: string }) => void>();
  constructor(readonly url: string) {
    FakeSource.last = this;
  }
  addEventListener(kind: string, fn: (e: { data: string }) => void) {
    this.listeners.set(kind, fn);
  }
  removeEventListener(kind: string) {
    this.listeners.delete(kind);
  }
  close() {
    this.closed = true;
  }
}

describe("openEventStream", () => {
  afterEach(() => vi.unstubAllGlobals());

  it("reports state, delivers parsed events by kind, and closes", () => {
    vi.stubGlobal("EventSource", FakeSource);
    const states: LiveState[] = [];
    const events: [string, unknown][] = [];
    const close = openEventStream("/api/v1/runs/1/events", ["status", "metrics"], (k, d) => events.push([k, d]),
      { onState: (s) => states.push(s), unparsed: "null" });
    const src = FakeSource.last;
    expect(src.url).toBe("/api/v1/runs/1/events");
    src.onopen?.();
    src.listeners.get("status")?.({ data: '{"status":"running"}' });
    src.listeners.get("metrics")?.({ data: "oops" });
    src.readyState = 0;
    src.onerror?.();
    src.readyState = 2;
    src.onerror?.();
    expect(states).toEqual(["connecting", "live", "reconnecting", "off"]);
    expect(events).toEqual([["status", { status: "running" }], ["metrics", null]]);
    close();
    expect(src.closed).toBe(true);
    expect(src.listeners.size).toBe(0);
  });
});
