import { describe, expect, it } from "vitest";
import { prefetch, takePrefetched } from "./prefetch";

describe("prefetch", () => {
  it("hands a prefetched request to the query with the same key, once", async () => {
    let sent = 0;
    prefetch(["metrics", [1, 2], 430], () => { sent += 1; return Promise.resolve("data"); });
    expect(sent).toBe(1);
    expect(takePrefetched(["metrics", [1, 2], 431])).toBeUndefined(); // another request: not this one
    await expect(takePrefetched<string>(["metrics", [1, 2], 430])).resolves.toBe("data");
    expect(takePrefetched(["metrics", [1, 2], 430])).toBeUndefined(); // a refetch asks the server again
  });

  it("passes a failure to the query that takes it, not to the console as unhandled", async () => {
    prefetch(["run", 9], () => Promise.reject(new Error("HTTP 404")));
    await expect(takePrefetched(["run", 9])).rejects.toThrow("HTTP 404");
  });
});
