import { describe, expect, it } from "vitest";
import { aliasesFromSchema, canonicalKey, formatValue, parseCommand, parseValue, shellSplit, toCommand } from "./verlCommand";

const SEED = `PYTHONUNBUFFERED=1 python3 -m verl.trainer.main_ppo \\
 data.train_files=$HOME/data/gsm8k/train.parquet \\
 data.val_files=$HOME/data/gsm8k/test.parquet \\
 data.train_batch_size=256 \\
 data.max_prompt_length=512 \\
 data.max_response_length=256 \\
 actor_rollout_ref.model.path=Qwen/Qwen2.5-0.5B-Instruct \\
 actor_rollout_ref.actor.optim.lr=1e-6 \\
 actor_rollout_ref.actor.ppo_mini_batch_size=64 \\
 actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4 \\
 actor_rollout_ref.rollout.name=naive \\
 actor_rollout_ref.rollout.tensor_model_parallel_size=1 \\
 actor_rollout_ref.rollout.gpu_memory_utilization=0.4 \\
 critic.optim.lr=1e-5 \\
 critic.model.path=Qwen/Qwen2.5-0.5B-Instruct \\
 algorithm.kl_ctrl.kl_coef=0.001 \\
 trainer.logger=['console'] \\
 trainer.val_before_train=False \\
 trainer.n_gpus_per_node=1 \\
 trainer.nnodes=1 \\
 trainer.save_freq=10 \\
 trainer.test_freq=10 \\
 trainer.total_epochs=15 2>&1 | tee verl_demo.log`;

describe("parseCommand", () => {
  it("parses the seed's command", () => {
    const p = parseCommand(SEED);
    expect(p.module).toBe("verl.trainer.main_ppo");
    expect(p.env).toEqual({ PYTHONUNBUFFERED: "1" });
    expect(p.values["data.train_files"]).toBe("$HOME/data/gsm8k/train.parquet");
    expect(p.values["data.train_batch_size"]).toBe(256);
    expect(p.values["actor_rollout_ref.actor.optim.lr"]).toBe(1e-6);
    expect(p.values["actor_rollout_ref.rollout.gpu_memory_utilization"]).toBe(0.4);
    expect(p.values["trainer.logger"]).toEqual(["console"]);
    expect(p.values["trainer.val_before_train"]).toBe(false);
    expect(p.values["trainer.total_epochs"]).toBe(15);
    expect(Object.keys(p.values)).toHaveLength(22);
    expect(p.ignored).toEqual([]);
  });

  it("handles +, ++, ~ and quoted lists", () => {
    const p = parseCommand(
      `python -m engine.main_ppo --config-name demo "trainer.logger=['console','wandb']" +new.key=v ++x.y=2 ~a.b ~c.d=3`,
    );
    expect(p.configName).toBe("demo");
    expect(p.values["trainer.logger"]).toEqual(["console", "wandb"]);
    expect(p.overrides.map((o) => o.op)).toEqual(["set", "add", "force", "delete", "delete"]);
    expect(p.values["new.key"]).toBe("v");
    expect(p.values["x.y"]).toBe(2);
    expect(p.deleted).toEqual(["a.b", "c.d"]);
  });

  it("handles unquoted shell lists, which bash strips of their quotes", () => {
    const p = parseCommand(`python -m engine.main_ppo trainer.logger=['console','file'] a.b=[1,2.5,null]`);
    expect(p.values["trainer.logger"]).toEqual(["console", "file"]);
    expect(p.values["a.b"]).toEqual([1, 2.5, null]);
  });

  it("reads values with spaces, dicts, negative and underscore numbers", () => {
    const p = parseCommand(`python -m m "x.name=hello world" y.d={a:1,b:'two'} z.n=-3 w.big=1_000 v.f=.5 u.e=1.0E-4`);
    expect(p.values["x.name"]).toBe("hello world");
    expect(p.values["y.d"]).toEqual({ a: 1, b: "two" });
    expect(p.values["z.n"]).toBe(-3);
    expect(p.values["w.big"]).toBe(1000);
    expect(p.values["v.f"]).toBe(0.5);
    expect(p.values["u.e"]).toBe(1e-4);
  });

  it("accepts overrides without the program, and ray job submit", () => {
    expect(parseCommand("data.train_batch_size=8 algorithm.adv_estimator=grpo").values).toEqual({
      "data.train_batch_size": 8, "algorithm.adv_estimator": "grpo",
    });
    const p = parseCommand("ray job submit --address http://127.0.0.1:8265 -- python -m engine.main_ppo a.b=1");
    expect(p.module).toBe("engine.main_ppo");
    expect(p.values).toEqual({ "a.b": 1 });
  });

  it("a later override wins; stray tokens are reported", () => {
    const p = parseCommand("python -m m a.b=1 a.b=2 stray");
    expect(p.values["a.b"]).toBe(2);
    expect(p.ignored).toEqual(["stray"]);
  });
});

describe("values", () => {
  it("parses scalars", () => {
    expect(parseValue("True")).toBe(true);
    expect(parseValue("null")).toBe(null);
    expect(parseValue("1e-6")).toBe(1e-6);
    expect(parseValue("Qwen/Qwen2.5-0.5B")).toBe("Qwen/Qwen2.5-0.5B");
    expect(parseValue("'123'")).toBe("123");
    expect(parseValue("[]")).toEqual([]);
  });
  it("formats and round-trips", () => {
    const values = { "a.lr": 1e-6, "t.logger": ["console", "file"], "m.path": "Qwen/Qwen2.5-0.5B", "x.s": "a b", "f": false, "n": null, "q": "123" };
    const cmd = toCommand(values);
    expect(cmd.startsWith("python -m engine.main_ppo")).toBe(true);
    expect(parseCommand(cmd).values).toEqual(values);
    expect(formatValue("123")).toBe("'123'");
  });
});

describe("shellSplit", () => {
  it("stops at redirects and pipes", () => {
    expect(shellSplit("a b=1 2>&1 | tee x")).toEqual(["a", "b=1"]);
    expect(shellSplit("a > out.log")).toEqual(["a"]);
    expect(shellSplit("a 'b c' \"d\\\"e\"")).toEqual(["a", "b c", 'd"e']);
  });
});

describe("verl 0.9's layout", () => {
  // the pairs come from the server's JSON Schema (`x-verl-aliases`, engine/config/verl_layout.py)
  const schema = {
    "x-verl-aliases": [
      ["critic.fsdp.ulysses_sequence_parallel_size", "critic.ulysses_sequence_parallel_size"],
      ["critic.fsdp.", "critic.model.fsdp_config."],
      ["actor_rollout_ref.actor.optim.clip_grad", "actor_rollout_ref.actor.grad_clip"],
      ["ray_kwargs.ray_init.", "ray_init."],
      ["reward.custom_reward_function.", "custom_reward_function."],
    ],
  };
  const aliases = aliasesFromSchema(schema);

  it("maps verl 0.9 keys to the canonical ones the form shows", () => {
    const p = parseCommand(
      `python3 -m verl.trainer.main_ppo critic.fsdp.param_offload=False critic.fsdp.ulysses_sequence_parallel_size=1 \\
       actor_rollout_ref.actor.optim.clip_grad=0.5 +ray_kwargs.ray_init.num_gpus=4 \\
       reward.custom_reward_function.path=r.py critic.optim.lr=1e-5`, aliases);
    expect(p.values).toEqual({
      "critic.model.fsdp_config.param_offload": false,
      "critic.ulysses_sequence_parallel_size": 1,
      "actor_rollout_ref.actor.grad_clip": 0.5,
      "ray_init.num_gpus": 4,
      "custom_reward_function.path": "r.py",
      "critic.optim.lr": 1e-5,
    });
    expect(p.overrides[0].raw).toBe("critic.fsdp.param_offload=False"); // what the user wrote stays visible
  });

  it("leaves the seed-era layout alone, and everything without aliases", () => {
    const seed = parseCommand("python -m engine.main_ppo critic.model.fsdp_config.param_offload=True", aliases);
    expect(seed.values).toEqual({ "critic.model.fsdp_config.param_offload": true });
    expect(parseCommand("python -m x critic.fsdp.param_offload=True").values).toEqual({ "critic.fsdp.param_offload": true });
    expect(aliasesFromSchema({})).toEqual([]);
  });

  it("does not map a key that only shares the prefix text", () => {
    expect(canonicalKey("ray_kwargs.ray_init_x", aliases)).toBe("ray_kwargs.ray_init_x");
    expect(canonicalKey("actor_rollout_ref.actor.optim.clip_grad_x", aliases)).toBe("actor_rollout_ref.actor.optim.clip_grad_x");
  });
});
