/**
 * The "Paste a verl command" box's state: the text, what filling the form from it did (the report), and
 * the base preset it lands on. A command that belongs on another base switches the preset (the form
 * remounts); the new form reads the pending paste on mount.
 */
import { useMemo, useState } from "react";
import type { Json } from "../../lib/configDiff";
import { pasteBase, presetValuesNotSet, type PasteWhy } from "../../lib/pasteBase";
import type { Field } from "../../lib/schemaForm";
import { aliasesFromSchema, parseCommand, type HydraValue } from "../../lib/verlCommand";
import type { Raw } from "./FieldInput";
import { rawOf } from "./fieldValues";

export interface PendingPaste {
  text: string;
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
  schema: object;
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

export function usePaste({ schema, byKey, defaults, presets, presetNames, preset, fork, pending, onPreset, onFill }: Options) {
  /** The form values a pasted command sets, and what to tell the user about the base underneath them. */
  const readPaste = (text: string, base: string | null, why: PasteWhy, replaced: string | null) => {
    const parsed = parseCommand(text);
    const unknown: string[] = [];
    const next: Record<string, Raw> = {};
    for (const [key, value] of Object.entries(parsed.values)) {
      const f = byKey.get(key);
      if (!f) unknown.push(key);
      else next[key] = rawOf(f, value);
    }
    const baseConfig = fork ? null : presets.find((p) => p.name === base)?.config;
    const kept = baseConfig ? presetValuesNotSet(baseConfig, Object.keys(next), defaults, (k) => byKey.has(k)) : [];
    const report: PasteReport = { applied: Object.keys(next).length, unknown, ignored: parsed.ignored, base, why, replaced, kept };
    return { next, report };
  };
  /** the paste carried across a preset switch, read once when this form mounts */
  const initial = useMemo(
    () => (pending ? readPaste(pending.text, preset, pending.chosen ? "chosen" : parseCommand(pending.text).configName ? "config-name" : "full-command",
      pending.chosen || pending.from === preset ? null : pending.from) : null),
    // eslint-disable-next-line react-hooks/exhaustive-deps
    []);

  const [text, setText] = useState(pending?.text ?? "");
  const [report, setReport] = useState<PasteReport | null>(initial?.report ?? null);

  /** Fill the form from the box; `chosen`: the base the user picked (a preset, or null for verl's defaults). */
  const apply = (chosen?: string | null) => {
    const plan = pasteBase(parseCommand(text, aliasesFromSchema(schema)), preset, presetNames, { fork, ...(chosen !== undefined ? { chosen } : {}) });
    if (plan.base !== preset) {
      onPreset(plan.base, { text, from: preset, chosen: chosen !== undefined });
      return;
    }
    const { next, report } = readPaste(text, plan.base, plan.why, null);
    onFill(next);
    setReport(report);
  };

  return { initial: initial?.next ?? null, text, setText, report, apply };
}
