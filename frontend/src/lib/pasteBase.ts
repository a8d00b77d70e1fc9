/**
 * What a pasted verl command is laid over. A whole command (`python -m ….main_ppo …`) means what it means
 * when it runs: verl's defaults underneath (or the `--config-name` it names), never the preset that happened
 * to be selected. Bare `key=value` lines are a tweak: they go over the selected preset. Either way the page
 * says which, and lists the preset's values the command did not set.
 */
import { flatten, sameValue, type Json } from "./configDiff";

export type PasteWhy = "config-name" | "full-command" | "snippet" | "fork" | "chosen";

export interface PastePlan {
  /** the preset underneath (null: the engine's, i.e. verl's, defaults) */
  base: string | null;
  why: PasteWhy;
}

export function pasteBase(parsed: { module: string | null; configName: string | null }, selected: string | null,
  presets: readonly string[], opts: { fork?: boolean; chosen?: string | null } = {}): PastePlan {
  if (opts.fork) return { base: selected, why: "fork" };
  if (opts.chosen !== undefined) return { base: opts.chosen, why: "chosen" };
  if (parsed.configName && presets.includes(parsed.configName)) return { base: parsed.configName, why: "config-name" };
  if (parsed.module !== null) return { base: null, why: "full-command" };
  return { base: selected, why: "snippet" };
}

/** The preset's values that the pasted keys leave in place and that differ from the engine defaults. */
export function presetValuesNotSet(presetConfig: unknown, pasted: Iterable<string>, defaults: Record<string, unknown>,
  known: (key: string) => boolean): [string, Json][] {
  const set = new Set(pasted);
  return Object.entries(flatten(presetConfig))
    .filter(([k, v]) => known(k) && !set.has(k) && !sameValue(v, defaults[k] ?? null))
    .sort(([a], [b]) => a.localeCompare(b));
}
