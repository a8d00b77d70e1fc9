/**
 * Server-sent events, the one EventSource wrapper: the browser's EventSource reconnects by itself and resumes
 * with Last-Event-ID; closing (the returned function) ends it for good. `useEventSource` is the React hook
 * over it; `useLiveMetrics` opens one per live run.
 */
import { useEffect, useRef, useState } from "react";
import { eventsUrl } from "./client";

export type Handlers = Record<string, (data: unknown) => void>;

export type LiveState = "connecting" | "live" | "reconnecting" | "off";

/** An event's data as JSON; what does not parse is passed on as the text itself ("text") or as null ("null"). */
export function parseEventData(raw: string, unparsed: "text" | "null" = "text"): unknown {
  try {
    return JSON.parse(raw);
  } catch {
    return unparsed === "text" ? raw : null;
  }
}

/** After an error the browser is reconnecting unless it gave up (readyState CLOSED, 2). */
export function stateAfterError(readyState: number): LiveState {
  return readyState === 2 ? "off" : "reconnecting";
}

export interface StreamOptions {
  onState?: (state: LiveState) => void;
  unparsed?: "text" | "null";
}

/** Listen to `kinds` on the stream at `path`; returns the function that closes it. */
export function openEventStream(path: string, kinds: string[], onEvent: (kind: string, data: unknown) => void,
  { onState, unparsed = "text" }: StreamOptions = {}): () => void {
  const source = new EventSource(eventsUrl(path));
  onState?.("connecting");
  source.onopen = () => onState?.("live");
  source.onerror = () => onState?.(stateAfterError(source.readyState));
  const listeners: [string, (e: MessageEvent) => void][] = kinds.map((kind) => [
    kind,
    (e: MessageEvent) => onEvent(kind, parseEventData(e.data, unparsed)),
  ]);
  for (const [kind, fn] of listeners) source.addEventListener(kind, fn);
  return () => {
    for (const [kind, fn] of listeners) source.removeEventListener(kind, fn);
    source.close();
  };
}

export function useEventSource(path: string | null, handlers: Handlers): LiveState {
  const ref = useRef(handlers);
  ref.current = handlers;
  const [state, setState] = useState<LiveState>(path ? "connecting" : "off");
  const kinds = Object.keys(handlers).sort().join(",");
  useEffect(() => {
    if (!path) {
      setState("off");
      return;
    }
    return openEventStream(path, kinds.split(",").filter(Boolean), (kind, data) => ref.current[kind]?.(data), { onState: setState });
  }, [path, kinds]);
  return state;
}
