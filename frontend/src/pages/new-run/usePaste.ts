/**
 * The "Paste a verl command" box's state: the text, what filling the form from it did (the report), and
 * the base preset it lands on. The server reads the command (POST /config/parse: the engine's own override
 * grammar, verl 0.9's keys mapped to the form's); a command that belongs on another base switches the preset
 * (the form remounts) and the new form fills itself from the command read before the switch.
 */
import { useMemo, useState } from "react";
import { ApiError } from "../../api/client";
import { parseCommand } from "../../api/queries";
import type { ParsedCommand } from "../../client/types.gen";
import type { Json } from "../../lib/configDiff";
import { pasteBase, presetValuesNotSet, type PasteWhy } from "../../lib/pasteBase";
import type { Field } from "../../lib/schemaForm";
import type { HydraValue } from "../../lib/hydraValue";
import type { Raw } from "./FieldInput";
import { rawOf } from "./fieldValues";

export interface PendingPaste {
  text: string;
  /** the command as the server read it */
  parsed: ParsedCommand;
  preset: string | null;
  /** the preset that was selected when the command was pasted */
  from: string | null;
  chosen: boolean;
}

export interface PasteReport {
  applied: number;
  unknown: string[];
  ignored: string[];
  base: string | null;
  why: PasteWhy;
  /** the preset set aside for verl's defaults (a whole command was pasted over it) */
  replaced: string | null;
  /** the base preset's values the command did not set */
  kept: [string, Json][];
}

interface Options {
  byKey: Map<string, Field>;
  defaults: Record<string, HydraValue | undefined>;
  presets: { name: string; config: Record<string, unknown> }[];
  presetNames: string[];
  preset: string | null;
  fork: boolean;
  pending: PendingPaste | null;
  onPreset: (name: string | null, paste?: Omit<PendingPaste, "preset">) => void;
  /** the form values a paste sets, on this form */
  onFill: (next: Record<string, Raw>) => void;
}

const shape = (parsed: ParsedCommand) => ({ module: parsed.module, configName: parsed.config_name });

export function usePaste({ byKey, defaults, presets, presetNames, preset, fork, pending, onPreset, onFill }: Options) {
  /** The form values a pasted command sets, and what to tell the user about the base underneath them. */
  const readPaste = (parsed: ParsedCommand, base: string | null, why: PasteWhy, replaced: string | null) => {
    const unknown: string[] = [];
    const next: Record<string, Raw> = {};
    for (const [key, value] of Object.entries(parsed.values)) {
      const f = byKey.get(key);
      if (!f) unknown.push(key);
      else next[key] = rawOf(f, value as HydraValue);
    }
    const baseConfig = fork ? null : presets.find((p) => p.name === base)?.config;
    const kept = baseConfig ? presetValuesNotSet(baseConfig, Object.keys(next), defaults, (k) => byKey.has(k)) : [];
    const report: PasteReport = { applied: Object.keys(next).length, unknown, ignored: parsed.ignored, base, why, replaced, kept };
    return { next, report };
  };
  /** the paste carried across a preset switch, read once when this form mounts */
  const initial = useMemo(
    () => (pending ? readPaste(pending.parsed, preset, pending.chosen ? "chosen" : pending.parsed.config_name ? "config-name" : "full-command",
      pending.chosen || pending.from === preset ? null : pending.from) : null),
    // eslint-disable-next-line react-hooks/exhaustive-deps
    []);

  const [text, setText] = useState(pending?.text ?? "");
  const [report, setReport] = useState<PasteReport | null>(initial?.report ?? null);
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<string | null>(null);

  /** Fill the form from the box; `chosen`: the base the user picked (a preset, or null for verl's defaults). */
  const apply = async (chosen?: string | null) => {
    setBusy(true);
    setError(null);
    let parsed: ParsedCommand;
    try {
      parsed = await parseCommand(text);
    } catch (e) {
      setError(e instanceof ApiError ? e.message : String(e));
      return;
    } finally {
      setBusy(false);
    }
    const plan = pasteBase(shape(parsed), preset, presetNames, { fork, ...(chosen !== undefined ? { chosen } : {}) });
    if (plan.base !== preset) {
      onPreset(plan.base, { text, parsed, from: preset, chosen: chosen !== undefined });
      return;
    }
    const { next, report } = readPaste(parsed, plan.base, plan.why, null);
    onFill(next);
    setReport(report);
  };

  return { initial: initial?.next ?? null, text, setText, report, busy, error, apply };
}
