import { QueryClient } from "@tanstack/react-query";
import { describe, expect, it } from "vitest";
import { isRunHealth, olderThan, onHealthStreamEvent, type RunHealth } from "./health";
import { qk } from "./queries";

const state = (status: RunHealth["status"], checked: number): RunHealth =>
  ({ run_id: 7, status, checked_step: checked, alarms: [], thresholds: {} });

describe("onHealthStreamEvent", () => {
  it("a health event replaces the cached state; another run's, or a malformed one, does not", () => {
    const qc = new QueryClient();
    qc.setQueryData(qk.health(7), state("ok", 3));
    onHealthStreamEvent(qc, 7, "health", state("warning", 9));
    expect(qc.getQueryData<RunHealth>(qk.health(7))?.status).toBe("warning");
    onHealthStreamEvent(qc, 7, "health", { ...state("ok", 10), run_id: 8 });
    onHealthStreamEvent(qc, 7, "health", { status: "ok" });
    onHealthStreamEvent(qc, 7, "metrics", state("ok", 10));
    expect(qc.getQueryData<RunHealth>(qk.health(7))?.checked_step).toBe(9);
    expect(isRunHealth(null)).toBe(false);
  });
  it("the stream opening or the run's status changing marks the state stale (refetched)", () => {
    for (const kind of ["hello", "status"]) {
      const qc = new QueryClient();
      qc.setQueryData(qk.health(7), state("ok", 3));
      expect(qc.getQueryState(qk.health(7))?.isInvalidated).toBe(false);
      onHealthStreamEvent(qc, 7, kind, {});
      expect(qc.getQueryState(qk.health(7))?.isInvalidated).toBe(true);
    }
  });
  it("an older state never replaces a newer one (a refetch answered after the stream pushed a change)", () => {
    const qc = new QueryClient();
    qc.setQueryData(qk.health(7), state("ok", 26));
    onHealthStreamEvent(qc, 7, "health", state("warning", 16));
    expect(qc.getQueryData<RunHealth>(qk.health(7))?.status).toBe("ok");
    expect(olderThan(state("warning", 16), state("ok", 26))).toBe(true);
    expect(olderThan(state("ok", 26), state("warning", 26))).toBe(false);
  });
});
