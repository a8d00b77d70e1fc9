/**
 * Model text. ALWAYS rendered as React text nodes (escaped), never as HTML: a generation containing
 * `<script>` or `<img onerror>` shows literally. Nothing in this app uses dangerouslySetInnerHTML.
 */
import type { DiffPart } from "../lib/wordDiff";

export function ModelText({ text, className = "" }: { text: string | null | undefined; className?: string }) {
  if (!text) return <div className={`model-text empty-text ${className}`}>(empty)</div>;
  return <div className={`model-text ${className}`}>{text}</div>;
}

export function DiffText({ parts }: { parts: DiffPart[] }) {
  return (
    <div className="model-text">
      {parts.map((p, i) =>
        p.op === "same" ? <span key={i}>{p.text}</span>
          : p.op === "added" ? <ins key={i} className="diff-added">{p.text}</ins>
            : <del key={i} className="diff-removed">{p.text}</del>)}
    </div>
  );
}
