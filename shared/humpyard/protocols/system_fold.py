"""System messages in the middle of a conversation, folded where chat templates take them.

Claude Code (its ``mid-conversation-system`` beta) and Codex (developer
messages on later turns) put system-role messages after the first user turn.
Many open-weight chat templates accept a system message only at the start,
and expect user and assistant turns to alternate, so an OpenAI-compatible
upstream would refuse or garble them. ``fold_system_messages`` keeps every
word and moves none of it out of order (docs/clients.md, "System messages
inside the conversation"):

- the leading run of system/developer messages becomes one system message;
- a later one becomes ``<system-reminder>`` text in the neighbouring user
  turn: appended to the user message it follows, else put before the next
  user message (after any tool results, which must follow their call), else
  a user message of its own where it stood.

``<system-reminder>`` is the tag Claude Code's own prompt tells the model
marks harness-injected context.
"""

from __future__ import annotations

from typing import Any

SYSTEM_ROLES = frozenset({"system", "developer"})
TAG = "system-reminder"


def message_text(content: Any) -> str:
    """The text of a chat message's content (a string or a list of text parts)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(p["text"] for p in content
                         if isinstance(p, dict) and isinstance(p.get("text"), str))
    return ""


def reminder(text: str) -> str:
    """``text`` wrapped as a system reminder."""
    return f"<{TAG}>\n{text}\n</{TAG}>"


def _with_text(message: dict, text: str, *, first: bool) -> dict:
    content = message.get("content")
    if isinstance(content, list):
        part = {"type": "text", "text": text}
        return {**message, "content": [part, *content] if first else [*content, part]}
    existing = content if isinstance(content, str) else ""
    if not existing:
        return {**message, "content": text}
    return {**message, "content": f"{text}\n{existing}" if first else f"{existing}\n{text}"}


def fold_system_messages(messages: list[dict]) -> tuple[list[dict], int]:
    """Return ``(messages, folded)``: chat messages with system messages only at the start.

    ``messages`` are OpenAI chat messages; ``system`` and ``developer`` roles
    count as system. The leading ones are joined (blank line between) into
    one ``system`` message; each later one is folded as described in the
    module docstring, and ``folded`` counts those. Empty system messages are
    dropped. The input list is not modified.
    """
    leading: list[str] = []
    out: list[dict] = []
    pending: list[str] = []
    folded = 0
    for message in messages:
        role = message.get("role")
        if role in SYSTEM_ROLES:
            text = message_text(message.get("content"))
            if not out:
                if text:
                    leading.append(text)
                continue
            if not text:
                continue
            folded += 1
            if out[-1].get("role") == "user" and not pending:
                out[-1] = _with_text(out[-1], reminder(text), first=False)
            else:
                pending.append(reminder(text))
            continue
        if pending and role == "user":
            message = _with_text(message, "\n".join(pending), first=True)
            pending = []
        elif pending and role != "tool":
            out.append({"role": "user", "content": "\n".join(pending)})
            pending = []
        out.append(message)
    if pending:
        out.append({"role": "user", "content": "\n".join(pending)})
    if leading:
        out.insert(0, {"role": "system", "content": "\n\n".join(leading)})
    return out, folded
