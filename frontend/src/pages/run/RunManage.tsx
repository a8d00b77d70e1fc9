/** Run management: rename, tags, notes, archive (hidden from the runs list), delete (refused while active). */
import { useMutation, useQueryClient } from "@tanstack/react-query";
import { useState } from "react";
import { useNavigate } from "react-router-dom";
import { ARCHIVED_TAG, isActive, qk, runWrites } from "../../api/queries";
import type { RunPublic, RunUpdate } from "../../client/types.gen";
import { ErrorBox } from "../../components/States";

export function parseTags(text: string): string[] {
  return [...new Set(text.split(",").map((t) => t.trim()).filter(Boolean))];
}

export function RunManage({ run }: { run: RunPublic }) {
  const qc = useQueryClient();
  const navigate = useNavigate();
  const [name, setName] = useState(run.name ?? "");
  const [tags, setTags] = useState((run.tags ?? []).filter((t) => t !== ARCHIVED_TAG).join(", "));
  const [notes, setNotes] = useState(run.notes ?? "");
  const archived = (run.tags ?? []).includes(ARCHIVED_TAG);
  const active = isActive(run.status);

  const update = useMutation({
    mutationFn: (body: RunUpdate) => runWrites.update(run.id, body),
    onSuccess: (updated) => {
      qc.setQueryData(qk.run(run.id), updated);
      void qc.invalidateQueries({ queryKey: qk.allRuns });
    },
  });
  const remove = useMutation({
    mutationFn: () => runWrites.remove(run.id),
    onSuccess: () => {
      void qc.invalidateQueries({ queryKey: qk.allRuns });
      navigate("/");
    },
  });
  const withArchive = (list: string[], on: boolean) => [...list.filter((t) => t !== ARCHIVED_TAG), ...(on ? [ARCHIVED_TAG] : [])];
  const dirty = name !== (run.name ?? "") || notes !== (run.notes ?? "")
    || parseTags(tags).join(",") !== (run.tags ?? []).filter((t) => t !== ARCHIVED_TAG).join(",");

  return (
    <section className="card" aria-label="manage run">
      <h2>Manage</h2>
      <form className="stack" onSubmit={(e) => {
        e.preventDefault();
        update.mutate({ name, notes, tags: withArchive(parseTags(tags), archived) });
      }}>
        <div className="form-section">
          <div className="field"><label htmlFor="manage-name">Name</label>
            <input id="manage-name" value={name} onChange={(e) => setName(e.target.value)} /></div>
          <div className="field"><label htmlFor="manage-tags">Tags</label>
            <input id="manage-tags" value={tags} onChange={(e) => setTags(e.target.value)} placeholder="comma, separated" /></div>
        </div>
        <div className="field"><label htmlFor="manage-notes">Notes</label>
          <textarea id="manage-notes" rows={3} value={notes} onChange={(e) => setNotes(e.target.value)} /></div>
        <div className="row">
          <button type="submit" className="primary" disabled={!dirty || update.isPending}>{update.isPending ? "Saving…" : "Save"}</button>
          {update.isSuccess && !dirty && <span className="small token-ok" role="status">Saved.</span>}
          <button type="button" disabled={update.isPending} data-archived={archived}
            title={archived ? "show it in the runs list again" : "hide it from the runs list (it stays reachable by its link)"}
            onClick={() => update.mutate({ tags: withArchive(run.tags ?? [], !archived) })}>
            {archived ? "Unarchive" : "Archive"}
          </button>
          <button type="button" className="danger" disabled={active || remove.isPending}
            title={active ? "cancel the run first: a run that may still write cannot be deleted" : "delete the run, its metrics, samples and logs"}
            onClick={() => {
              if (window.confirm(`Delete run ${run.id} (${run.name || "unnamed"}) with its metrics, samples and logs? This cannot be undone.`)) remove.mutate();
            }}>Delete…</button>
          {active && <span className="small muted">Delete: cancel the run first.</span>}
        </div>
        {update.error && <ErrorBox error={update.error} />}
        {remove.error && <ErrorBox error={remove.error} />}
      </form>
    </section>
  );
}
