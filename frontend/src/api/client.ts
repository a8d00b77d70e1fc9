/** The generated client, configured once: same-origin API, optional bearer token (RLSTUDIO_API_TOKEN). */
import { client } from "../client/client.gen";

export const TOKEN_STORAGE_KEY = "rlstudio.apiToken";

export function apiToken(): string | null {
  try {
    return localStorage.getItem(TOKEN_STORAGE_KEY);
  } catch {
    return null;
  }
}

/** Save (or, with an empty string, forget) the API token; the client reads it on every request. */
export function setApiToken(token: string): void {
  try {
    if (token.trim()) localStorage.setItem(TOKEN_STORAGE_KEY, token.trim());
    else localStorage.removeItem(TOKEN_STORAGE_KEY);
  } catch {
    // storage disabled: nothing to keep
  }
}

client.setConfig({ baseUrl: "" });
// The OpenAPI document declares no security scheme (the server checks the header itself), so the generated
// client's `auth` option would never be applied: every request gets the header here instead.
client.interceptors.request.use((request) => {
  const token = apiToken();
  if (token && !request.headers.has("Authorization")) request.headers.set("Authorization", `Bearer ${token}`);
  return request;
});

export interface FieldError {
  loc?: (string | number)[];
  msg: string;
  type?: string;
  field?: string | null;
}

/** An API failure with the status and the server's message(s). */
export class ApiError extends Error {
  constructor(readonly status: number, readonly detail: unknown) {
    super(ApiError.describe(status, detail));
  }
  static describe(status: number, detail: unknown): string {
    if (typeof detail === "string") return detail;
    if (Array.isArray(detail)) return detail.map((d) => (d as FieldError).msg).join("; ");
    return `HTTP ${status}`;
  }
  get fieldErrors(): FieldError[] {
    return Array.isArray(this.detail) ? (this.detail as FieldError[]) : [];
  }
}

type Result<T> = { data?: T; error?: unknown; response?: Response };

/** Await a generated SDK call; throw ApiError on an HTTP error, return the data otherwise. */
export async function unwrap<T>(call: Promise<Result<T>>): Promise<T> {
  let result: Result<T>;
  try {
    result = await call;
  } catch (e) {
    throw new ApiError(0, `Cannot reach the server (${(e as Error).message}).`);
  }
  if (result.error !== undefined || (result.response && !result.response.ok)) {
    const body = result.error as { detail?: unknown } | undefined;
    throw new ApiError(result.response?.status ?? 0, body && typeof body === "object" && "detail" in body ? body.detail : body);
  }
  return result.data as T;
}

/** EventSource URLs carry the token as a query parameter (EventSource cannot send headers). */
export function eventsUrl(path: string): string {
  const token = apiToken();
  return token ? `${path}?access_token=${encodeURIComponent(token)}` : path;
}
