/**
 * New run: a form generated from the engine's JSON Schema. Essentials first, every other key under
 * "Advanced"; presets; a box that fills the form from a pasted verl command; server 422s shown at the field.
 * `?fork=<id>` opens it prefilled from that run (and submits a fork); `?preset=<name>` picks a preset.
 */
import { useState } from "react";
import { useSearchParams } from "react-router-dom";
import { useConfigSchema, usePresets, useRun } from "../../api/queries";
import { ErrorBox, Loading } from "../../components/States";
import { presetOrder } from "./presets";
import { RunForm } from "./RunForm";
import type { PendingPaste } from "./usePaste";

export function NewRunPage() {
  const [params, setParams] = useSearchParams();
  const forkId = params.get("fork") ? Number(params.get("fork")) : null;
  const schema = useConfigSchema();
  const presets = usePresets();
  const parent = useRun(forkId);
  // a pasted command that belongs on another base (verl's defaults, its --config-name) switches the preset,
  // which remounts the form: the paste travels across the switch and is applied by the new form
  const [pending, setPending] = useState<PendingPaste | null>(null);
  if (schema.isLoading || presets.isLoading || (forkId !== null && parent.isLoading)) return <Loading what="Loading the run-config schema" />;
  const error = schema.error ?? presets.error ?? parent.error;
  if (error) return <ErrorBox error={error} retry={() => { void schema.refetch(); void presets.refetch(); }} />;
  const presetNames = presetOrder((presets.data?.data ?? []).map((p) => p.name));
  // no ?preset: the first demo (the server names it); ?preset= (empty): the engine's defaults
  const asked = params.get("preset");
  const demo = presets.data?.demo ?? null;
  const preset = forkId !== null ? null : asked === null ? (demo !== null && presetNames.includes(demo) ? demo : null) : asked || null;
  const key = forkId !== null ? `fork-${forkId}` : `preset-${preset ?? ""}`;
  return (
    <RunForm key={key} schema={schema.data as object} presets={presets.data?.data ?? []} presetNames={presetNames}
      preset={preset} parent={forkId !== null ? parent.data ?? null : null} pending={pending?.preset === preset ? pending : null}
      onPreset={(name, paste) => {
        setPending(paste ? { ...paste, preset: name } : null);
        setParams(name === null ? { preset: "" } : { preset: name });
      }} />
  );
}
