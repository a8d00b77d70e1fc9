/** The import upload: multipart/form-data to POST /api/v1/imports/{kind}, sent with XMLHttpRequest for its upload
 *  progress (a verl run's files can be hundreds of MB; the server streams them to disk, a line at a time). */
import { apiToken } from "../../api/client";
import type { RunPublic } from "../../client/types.gen";

export type ImportKind = "verl" | "tensorboard";

export interface ImportFiles {
  metrics?: File | null; // verl: the file logger's JSONL
  config?: File | null; // verl: .hydra/config.yaml
  rollout?: File[]; // verl: trainer.rollout_data_dir's <step>.jsonl
  validation?: File[]; // verl: trainer.validation_data_dir's
  events?: File[]; // TensorBoard: events.out.tfevents.*
}

export interface ImportTarget {
  experiment: string;
  name: string;
  tags: string;
}

export interface ImportResult {
  run: RunPublic;
  lines: number;
  steps: number;
  points: number;
  samples: Record<string, number>;
  skipped_values: Record<string, number>;
  notes: string[];
}

/** What went wrong, in the server's words: each 422's field and message (the file, the line, the problem). */
export class ImportError extends Error {
  constructor(message: string, readonly field: string | null) {
    super(message);
  }
}

export function formData(kind: ImportKind, files: ImportFiles, target: ImportTarget): FormData {
  const form = new FormData();
  if (kind === "verl") {
    if (files.metrics) form.append("metrics", files.metrics, files.metrics.name);
    if (files.config) form.append("config", files.config, files.config.name);
    for (const f of files.rollout ?? []) form.append("rollout", f, f.name);
    for (const f of files.validation ?? []) form.append("validation", f, f.name);
  } else {
    for (const f of files.events ?? []) form.append("events", f, f.name);
  }
  if (target.experiment.trim()) form.append("experiment", target.experiment.trim());
  if (target.name.trim()) form.append("name", target.name.trim());
  for (const tag of target.tags.split(",").map((t) => t.trim()).filter(Boolean)) form.append("tags", tag);
  return form;
}

export function errorOf(status: number, text: string): ImportError {
  try {
    const detail = (JSON.parse(text) as { detail?: unknown }).detail;
    if (Array.isArray(detail) && detail.length) {
      const first = detail[0] as { loc?: unknown[]; msg?: string };
      const field = Array.isArray(first.loc) && first.loc.length > 1 ? String(first.loc[1]) : null;
      return new ImportError(detail.map((d) => (d as { msg?: string }).msg ?? "").join("; "), field);
    }
    if (typeof detail === "string") return new ImportError(detail, null);
  } catch {
    // not JSON: the status says enough
  }
  return new ImportError(status ? `The server answered ${status}.` : "Cannot reach the server.", null);
}

export function upload(kind: ImportKind, form: FormData, onProgress: (fraction: number) => void): Promise<ImportResult> {
  return new Promise((resolve, reject) => {
    const xhr = new XMLHttpRequest();
    xhr.open("POST", `/api/v1/imports/${kind}`);
    const token = apiToken();
    if (token) xhr.setRequestHeader("Authorization", `Bearer ${token}`);
    xhr.upload.onprogress = (e) => { if (e.lengthComputable) onProgress(e.loaded / e.total); };
    xhr.onload = () => {
      if (xhr.status === 201) resolve(JSON.parse(xhr.responseText) as ImportResult);
      else reject(errorOf(xhr.status, xhr.responseText));
    };
    xhr.onerror = () => reject(errorOf(0, ""));
    xhr.send(form);
  });
}
