/** The run's log: the last lines from the API, then new ones as the SSE stream delivers them. */
import { useEffect, useRef, useState } from "react";
import { useLogHistory } from "../../api/queries";
import { ErrorBox, Loading } from "../../components/States";

const KEEP = 1000;

interface Line { key: string; text: string }

export function useLogTail(runId: number) {
  const history = useLogHistory(runId);
  const [live, setLive] = useState<Line[]>([]);
  const append = (data: { source?: string; lines: [number, string, number][] }) =>
    setLive((prev) => [...prev, ...data.lines.map(([seq, text]) => ({ key: `${data.source ?? ""}:${seq}`, text }))].slice(-KEEP));
  const seen = new Set<string>();
  const lines: Line[] = [];
  for (const l of history.data?.data ?? []) {
    const key = `${l.source}:${l.seq}`;
    seen.add(key);
    lines.push({ key, text: l.text });
  }
  for (const l of live) if (!seen.has(l.key)) lines.push(l);
  return { lines: lines.slice(-KEEP), append, loading: history.isLoading, error: history.error };
}

/** One record a row: long records scroll sideways, or (wrap on) wrap with the continuation indented under the first
 *  line, so a wrapped record never reads as two. */
export function LogTail({ state }: { state: ReturnType<typeof useLogTail> }) {
  const ref = useRef<HTMLDivElement>(null);
  const [follow, setFollow] = useState(true);
  const [wrap, setWrap] = useState(false);
  useEffect(() => {
    if (follow && ref.current) ref.current.scrollTop = ref.current.scrollHeight;
  }, [state.lines.length, follow]);
  if (state.loading) return <Loading what="Loading log" />;
  if (state.error) return <ErrorBox error={state.error} />;
  if (!state.lines.length) return <div className="muted">No log lines yet.</div>;
  return (
    <>
      <div ref={ref} className={`log-tail${wrap ? " wrap" : ""}`} tabIndex={0} role="log" aria-label="log"
        onScroll={(e) => {
          const el = e.currentTarget;
          setFollow(el.scrollHeight - el.scrollTop - el.clientHeight < 20);
        }}>
        {state.lines.map((l) => <div key={l.key} className="log-line">{l.text || "\u00a0"}</div>)}
      </div>
      <div className="row small">
        <label><input type="checkbox" checked={wrap} onChange={(e) => setWrap(e.target.checked)} /> wrap long lines</label>
        {!follow && <button type="button" className="link-button" onClick={() => setFollow(true)}>follow ↓</button>}
      </div>
    </>
  );
}
