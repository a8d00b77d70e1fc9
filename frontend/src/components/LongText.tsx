/** Text that may be long (a real model's answer, a word problem) in a narrow place such as a table cell: it wraps,
 * and past `limit` characters it shows the beginning with a button that shows the rest (never cut without a way
 * to read it). Text stays text (React text nodes, never HTML). */
import { useState } from "react";

export function LongText({ text, limit = 160, className = "" }: { text: string | null | undefined; limit?: number; className?: string }) {
  const [open, setOpen] = useState(false);
  if (!text) return <span className={`muted ${className}`}>—</span>;
  const long = text.length > limit;
  return (
    <span className={`long-text ${className}`} data-long-text={long ? (open ? "open" : "cut") : "whole"}>
      {long && !open ? `${text.slice(0, limit).trimEnd()}…` : text}
      {long && (
        <button type="button" className="link-button small" aria-expanded={open} onClick={() => setOpen((o) => !o)}>
          {open ? "less" : `more (${text.length} characters)`}
        </button>
      )}
    </span>
  );
}
