/** A schema "x-group" of the New-run form (e.g. LoRA) as a card of its own: its fields under the object each
 * belongs to (actor_rollout_ref.model, critic.model), in schema order. */
import type { ReactNode } from "react";
import { subsectionOf, type Field, type FieldGroup } from "../../lib/schemaForm";

export function FieldGroupCard({ group, renderField }: { group: FieldGroup; renderField: (f: Field) => ReactNode }) {
  const subsections = [...new Set(group.fields.map(subsectionOf))];
  return (
    <section className="card" data-group={group.name} aria-label={group.name}>
      <h2>{group.name}</h2>
      {subsections.map((s) => (
        <div key={s} className="advanced-group">
          {subsections.length > 1 && <h3>{s}</h3>}
          <div className="form-section">{group.fields.filter((f) => subsectionOf(f) === s).map(renderField)}</div>
        </div>
      ))}
    </section>
  );
}
