/** Display names of the presets the engine ships (engine/configs/*.yaml); unknown presets show their file name. */
export const PRESET_LABELS: Record<string, { label: string; help: string }> = {
  demo_ppo: { label: "Tiny arithmetic demo · PPO, all four roles (CPU)", help: "Built-in tiny model learns 2-digit arithmetic with the seed's PPO: actor, rollout, reference and a critic; GAE, KL to the reference in the reward held near 0.08 by an adaptive coefficient. Held-out accuracy ~30% -> ~55% in 300 steps; a few minutes on a laptop CPU." },
  demo: { label: "Tiny arithmetic demo · GRPO (CPU)", help: "The same task with GRPO: actor and rollout only (8 answers per prompt, no critic, no reference); ~30% -> ~60% in 1,000 steps, minutes on a laptop CPU." },
  demo_lora: { label: "Tiny arithmetic demo · GRPO with LoRA (CPU)", help: "The GRPO demo training a rank-8 LoRA adapter (35k of 398k parameters) at 10x the learning rate: ~30% -> ~52% in 300 steps (+15 by step 150-200), a few minutes on a laptop CPU." },
  demo_ppo_lora: { label: "Tiny arithmetic demo · PPO with LoRA actor and critic (CPU)", help: "The PPO demo with rank-8 LoRA adapters on the actor and the critic (its value head trains in full); the reference is the base model with the adapter off. ~30% -> ~58% in 300 steps (+15 by step 100)." },
  real_next_number: { label: "A real model learns · SmolLM2-135M-Instruct · GRPO with LoRA (CPU)", help: "A real 135M instruct model (Apache-2.0, prepared from a PyPI wheel on first use, ~540 MB) answers \"What number comes after 674?\" after two example turns: right 35% of the time when sampled at temperature 1. GRPO trains a rank-16 LoRA adapter; watch val-core/next_number/reward/mean@1 (greedy, 99 held-out numbers). Slow on a laptop CPU: tens of seconds a step." },
  calculator_tool_use: { label: "Calculator tool use, learned (CPU)", help: "Three-digit multiplication, which the tiny model cannot do in its head, with the calculator. Its warm start has seen the call format on a fifth of its examples and mostly guesses; GRPO with multi-turn rollouts learns to call the calculator and copy its answer. Watch val-core/arith_tool/reward/mean@1 and val-aux/tool/use_fraction rise (measured: 1% -> 84% and 1% -> 93% in 20 steps). A few minutes." },
  calculator_multi_turn: { label: "Calculator tool, multi-turn (CPU)", help: "The tiny arithmetic demo with multi-turn rollouts: the model's turns and the calculator's answers form one trajectory, the loss sees only the model's tokens. Its tool config makes the tiny model (which never saw a tool call) call the calculator every step: it shows the plumbing (conversations, tool errors, masks, num_turns and tool metrics), not that tool use is learned. About a minute." },
  "gsm8k_ppo_qwen2.5_0.5b": { label: "GSM8K · Qwen2.5-0.5B · PPO (the seed's command)", help: "PPO with a critic on GSM8K, as in the seed's command. Needs a GPU." },
  gsm8k_grpo: { label: "GSM8K · GRPO", help: "GRPO (no critic) on GSM8K. Needs a GPU." },
};

export function presetLabel(name: string): string {
  return PRESET_LABELS[name]?.label ?? name;
}

/** The presets above in their order (the first demo, then the GRPO demo, ...), then the rest in name order. */
export function presetOrder(names: string[]): string[] {
  const known = Object.keys(PRESET_LABELS).filter((n) => names.includes(n));
  return [...known, ...names.filter((n) => !known.includes(n)).sort()];
}
