/** Server-sent events: the browser's EventSource reconnects by itself and resumes with Last-Event-ID. */
import { useEffect, useRef, useState } from "react";
import { eventsUrl } from "./client";

export type Handlers = Record<string, (data: unknown) => void>;

export type LiveState = "connecting" | "live" | "reconnecting" | "off";

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
    const source = new EventSource(eventsUrl(path));
    setState("connecting");
    source.onopen = () => setState("live");
    source.onerror = () => setState(source.readyState === EventSource.CLOSED ? "off" : "reconnecting");
    const listeners: [string, (e: MessageEvent) => void][] = kinds.split(",").filter(Boolean).map((kind) => [
      kind,
      (e: MessageEvent) => {
        let data: unknown = null;
        try {
          data = JSON.parse(e.data);
        } catch {
          data = e.data;
        }
        ref.current[kind]?.(data);
      },
    ]);
    for (const [kind, fn] of listeners) source.addEventListener(kind, fn);
    return () => {
      for (const [kind, fn] of listeners) source.removeEventListener(kind, fn);
      source.close();
    };
  }, [path, kinds]);
  return state;
}
