/**
 * The question an answer answers: the prompt's last user turn as text (the chat template's tokens left out),
 * with the raw prompt (template tokens, system turn and all) one click away.
 */
import { useState } from "react";
import { questionOf } from "../lib/question";
import { ModelText } from "./Text";

export function Question({ prompt, label = "question" }: { prompt: string | null | undefined; label?: string }) {
  const [raw, setRaw] = useState(false);
  if (!prompt) return null;
  const q = questionOf(prompt);
  return (
    <div className="question" data-question>
      <div className="question-head small">
        <span className="muted">{label}</span>
        {q.templated && (
          <button type="button" className="link-button" aria-pressed={raw} onClick={() => setRaw((r) => !r)}
            title="the prompt as the model saw it: chat-template tokens, system turn and all">
            {raw ? "question only" : "raw prompt"}
          </button>
        )}
      </div>
      {raw ? <ModelText text={prompt} className="raw-prompt" /> : <ModelText text={q.text} className="question-text" />}
    </div>
  );
}
