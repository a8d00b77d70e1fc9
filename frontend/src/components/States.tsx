/** Loading, empty and error states, the same on every page. */
import type { ReactNode } from "react";
import { Link } from "react-router-dom";
import { ApiError } from "../api/client";

export function Loading({ what = "Loading" }: { what?: string }) {
  return <div className="state state-loading" role="status" aria-live="polite"><span className="spinner" aria-hidden /> {what}…</div>;
}

export function Empty({ title, children }: { title: string; children?: ReactNode }) {
  return (
    <div className="state state-empty">
      <strong>{title}</strong>
      {children && <div className="muted">{children}</div>}
    </div>
  );
}

export function ErrorBox({ error, retry }: { error: unknown; retry?: () => void }) {
  const message = error instanceof Error ? error.message : String(error);
  return (
    <div className="state state-error" role="alert">
      <strong>Something went wrong.</strong> <span>{message}</span>
      {retry && <button type="button" onClick={retry}>Retry</button>}
      {error instanceof ApiError && (error.status === 401 || error.status === 403) && (
        <div className="auth-hint">This server needs an API token: <Link to="/settings">set it in Settings</Link>.</div>
      )}
    </div>
  );
}

/** Render one query's three states, then the content. */
export function QueryState<T>({ query, empty, children, what }: {
  query: { data: T | undefined; isLoading: boolean; error: unknown; refetch?: () => unknown };
  empty?: (data: T) => ReactNode | null;
  children: (data: T) => ReactNode;
  what?: string;
}) {
  if (query.isLoading) return <Loading what={what} />;
  if (query.error) return <ErrorBox error={query.error} retry={query.refetch ? () => void query.refetch!() : undefined} />;
  if (query.data === undefined) return <Loading what={what} />;
  const e = empty?.(query.data);
  if (e) return <>{e}</>;
  return <>{children(query.data)}</>;
}
