/** "Start from": one card per preset, then the engine's defaults (no preset). */
import { presetLabel, PRESET_LABELS } from "./presets";

export function PresetPicker({ presetNames, preset, onPreset }: {
  presetNames: string[];
  preset: string | null;
  onPreset: (name: string | null) => void;
}) {
  return (
    <section className="card">
      <h2>Start from</h2>
      <div className="preset-cards" role="group" aria-label="presets">
        {presetNames.map((n) => (
          <button key={n} type="button" className="preset-card" aria-pressed={preset === n} data-preset={n} onClick={() => onPreset(n)}>
            <strong>{presetLabel(n)}</strong>
            <span className="small muted">{PRESET_LABELS[n]?.help ?? `engine/configs/${n}.yaml`}</span>
          </button>
        ))}
        <button type="button" className="preset-card" aria-pressed={preset === null} onClick={() => onPreset(null)}>
          <strong>Engine defaults</strong><span className="small muted">verl's defaults, no preset</span>
        </button>
      </div>
    </section>
  );
}
