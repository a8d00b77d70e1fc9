/**
 * Model text. ALWAYS rendered as React text nodes (escaped), never as HTML: a generation containing
 * `<script>` or `<img onerror>` shows literally. Nothing in this app uses dangerouslySetInnerHTML.
 */
import { splitSpecial } from "../lib/specialTokens";
import type { DiffPart } from "../lib/wordDiff";

/** `template`: the text may hold chat-template tokens (a multi-turn turn's text): they show as small named markers
 * (the raw token in the tooltip), never as raw `<|im_end|>`. */
export function ModelText({ text, className = "", template = false }: { text: string | null | undefined; className?: string; template?: boolean }) {
  if (!text) return <div className={`model-text empty-text ${className}`}>(empty)</div>;
  if (!template) return <div className={`model-text ${className}`}>{text}</div>;
  return (
    <div className={`model-text ${className}`}>
      {splitSpecial(text).map((p, i) => (p.special
        ? <span key={i} className="special-token" title={p.text} data-special={p.text}>{p.special}</span>
        : <span key={i}>{p.text}</span>))}
    </div>
  );
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
