import { describe, expect, it } from "vitest";
import { deviceFact, fmtCount, parameterFact, planFact } from "./runFacts";

describe("runFacts", () => {
  it("counts in short", () => {
    expect(fmtCount(950)).toBe("950");
    expect(fmtCount(12_345)).toBe("12.3K");
    expect(fmtCount(494_032_768)).toBe("494M");
    expect(fmtCount(7_615_616_512)).toBe("7.62B");
  });

  it("LoRA: trainable vs total with the share", () => {
    const f = parameterFact({ n_params: 498_431_872, n_trainable_params: 4_399_104 });
    expect(f).toEqual({ text: "4.4M trainable / 498M parameters (0.88%)", title: "4,399,104 trainable of 498,431,872", partial: true });
    expect(parameterFact({ n_params: 1e9, n_trainable_params: 10 })?.text).toBe("10 trainable / 1B parameters (<0.01%)");
  });

  it("full fine-tuning says so in a few words", () => {
    expect(parameterFact({ n_params: 494_032_768, n_trainable_params: 494_032_768 })).toEqual({
      text: "494M parameters, all trainable", title: "494,032,768 trainable of 494,032,768 (full fine-tuning)", partial: false,
    });
  });

  it("what was reported, no more", () => {
    expect(parameterFact({ n_params: 1_000_000 })?.text).toBe("1M parameters");  // an engine before n_trainable_params
    expect(parameterFact({})).toBeNull();
    expect(parameterFact(undefined)).toBeNull();
    expect(parameterFact({ n_params: "many" })).toBeNull();
  });

  it("the critic's counts under its own keys", () => {
    const facts = { n_params: 498_431_872, n_trainable_params: 4_399_104, critic_n_params: 494_033_665, critic_n_trainable_params: 4_400_001 };
    expect(parameterFact(facts, "critic")).toEqual({ text: "4.4M trainable / 494M parameters (0.89%)", title: "4,400,001 trainable of 494,033,665", partial: true });
    expect(parameterFact(facts)?.text).toBe("4.4M trainable / 498M parameters (0.88%)");
    expect(parameterFact({ n_params: 10, n_trainable_params: 10 }, "critic")).toBeNull();  // no critic
  });

  it("device", () => {
    expect(deviceFact({ device: "cuda", device_name: "NVIDIA H100 80GB HBM3", workers: 2 })).toBe("NVIDIA H100 80GB HBM3 × 2");
    expect(deviceFact({ device: "cpu", device_name: "cpu", workers: 1 })).toBe("cpu");
    expect(deviceFact({})).toBeNull();
  });
});

describe("planFact", () => {
  it("reads the job's plan from the facts, skipping what is not an entry", () => {
    const plan = [{ key: "trainer.device", value: "cpu", was: "auto", why: "no CUDA device", by: "driver" }, "junk", { value: 1 }];
    expect(planFact({ plan })).toEqual([plan[0]]);
    expect(planFact({})).toEqual([]);
    expect(planFact(null)).toEqual([]);
  });
});
