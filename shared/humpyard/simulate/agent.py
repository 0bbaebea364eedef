"""What the simulated provider does with a coding agent's tools.

A coding agent (Claude Code, Codex, OpenCode) sends its tools with every
turn; the gateway hands them to the simulator as OpenAI chat functions.
``agent_call(body)`` reads the latest instruction and, when it asks for
something these tools can do, returns the one well-formed call that does it
in the agent's working directory:

- "create hello.txt containing hi" (also "write hi to hello.txt", "make a
  file notes.md with the text …"): a file-write tool (Claude Code's
  ``Write``, OpenCode's ``write``), else a patch tool (Codex's
  ``apply_patch``), else a shell tool writing the file with ``printf``;
- "run `ls -la`" (also "run the command …", "execute …"): a shell tool
  (``Bash``, ``bash``, Codex's ``exec_command``, ``shell`` or
  ``shell_command``).

Tools are recognised by name and by their parameters' names, so a schema
that moved a parameter or renamed a tool gets no call rather than a wrong
one. Once a tool result follows the instruction, ``finished`` says so and
the simulator answers with a short text: one call per instruction, never a
loop. The working directory comes from what the agents tell their model
(``<cwd>`` for Codex, "Primary working directory:" for Claude Code,
"Working directory:" for OpenCode); a relative path is made absolute with it
(Claude Code's ``Write`` wants an absolute path).
"""

from __future__ import annotations

import json
import posixpath
import re
import shlex
from dataclasses import dataclass
from typing import Any

# -- what was asked ---------------------------------------------------------------

_Q = r"[`'\"]?"
_PATH = r"(?P<path>[\w.~/-]+)"
_WRITE = (
    re.compile(rf"\b(?:create|write|make|add)\s+(?:a\s+)?(?:new\s+)?(?:file\s+)?"
               rf"(?:called\s+|named\s+)?{_Q}{_PATH}{_Q}\s+"
               r"(?:containing|that\s+says|with\s+(?:the\s+)?(?:content|contents|text)|with)"
               r"\s*:?\s+(?P<content>.+)", re.I | re.S),
    re.compile(rf"\bwrite\s+(?P<content>.+?)\s+(?:to|into|in)\s+(?:a\s+)?(?:file\s+)?"
               rf"(?:called\s+|named\s+)?{_Q}{_PATH}{_Q}\s*[.!]?\s*$", re.I | re.S),
)
_RUN = (
    re.compile(r"\b(?:run|execute)\s+(?:the\s+)?(?:command\s+|shell\s+command\s+)?"
               r"`(?P<cmd>[^`]+)`", re.I),
    re.compile(r"\b(?:run|execute)\s+(?:the\s+)?(?:command\s+|shell\s+command\s+)?"
               r"(?P<cmd>.+?)(?:\s+and\s+(?:tell|show|report|say)\b.*)?\s*[.!]?\s*$",
               re.I | re.S),
)
_CWD = (re.compile(r"<cwd>\s*([^<\n]+?)\s*</cwd>"),
        re.compile(r"(?:Primary working directory|Working directory|cwd)\s*:\s*(/[^\s<`'\"]*)"))
_REMINDERS = re.compile(r"<(system-reminder|environment_context|user_instructions|"
                        r"permissions instructions|skills_instructions)>.*?</\1>", re.S)


@dataclass(frozen=True, slots=True)
class Task:
    """What the latest instruction asks: ``write`` a file, or ``run`` a command."""

    kind: str  # "write" | "run"
    path: str = ""
    content: str = ""
    command: str = ""


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(p.get("text", "") for p in content
                         if isinstance(p, dict) and isinstance(p.get("text"), str))
    return ""


def instruction(text: str) -> str:
    """``text`` without the context agents wrap around a prompt (reminders, environment)."""
    return _REMINDERS.sub("", text).strip()


def _unquote(text: str) -> str:
    text = text.strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "`'\"":
        return text[1:-1]
    return text


def parse_task(text: str) -> Task | None:
    """The task in an instruction, or None when it asks for nothing a tool does here."""
    said = instruction(text)
    for pattern in _WRITE:
        m = pattern.search(said)
        if m:
            content = m.group("content").strip()
            content = re.sub(r"[.!]\s*$", "", content) if not content.endswith("..") else content
            path = m.group("path").rstrip(".,")
            if path and "." in posixpath.basename(path) or "/" in path:
                return Task("write", path=path, content=_unquote(content))
    for pattern in _RUN:
        m = pattern.search(said)
        if m:
            command = _unquote(m.group("cmd").strip())
            if command:
                return Task("run", command=command)
    return None


def working_directory(body: dict[str, Any]) -> str | None:
    """The agent's working directory as it told its model, if it did."""
    for message in body.get("messages") or ():
        if not isinstance(message, dict):
            continue
        text = _text(message.get("content"))
        for pattern in _CWD:
            m = pattern.search(text)
            if m and m.group(1).startswith("/"):
                return m.group(1).rstrip("/.") or "/"
    return None


def _latest_instruction(messages: list[Any]) -> tuple[int, str] | None:
    """The index and text of the last user message that says something (not only
    context the agent wrapped around it)."""
    for i in range(len(messages) - 1, -1, -1):
        m = messages[i]
        if isinstance(m, dict) and m.get("role") == "user":
            said = instruction(_text(m.get("content")))
            if said:
                return i, said
    return None


def finished(messages: list[Any]) -> bool:
    """Whether a tool result came back after the latest instruction."""
    latest = _latest_instruction(messages)
    start = latest[0] + 1 if latest else 0
    return any(isinstance(m, dict) and m.get("role") == "tool" for m in messages[start:])


# -- which tool, with which arguments ---------------------------------------------

WRITE_TOOLS = ("write", "write_file", "create_file")
PATCH_TOOLS = ("apply_patch",)
SHELL_TOOLS = ("bash", "exec_command", "shell_command", "shell", "run_shell_command")
_PATH_KEYS = ("file_path", "filePath", "path", "absolute_path")
_CONTENT_KEYS = ("content", "contents", "file_text", "text")


@dataclass(frozen=True, slots=True)
class Call:
    """One tool call: the function's name and its arguments (JSON-ready)."""

    name: str
    arguments: dict[str, Any]

    def arguments_json(self) -> str:
        return json.dumps(self.arguments)


def _functions(body: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(name, parameters) of each function tool offered."""
    out: list[tuple[str, dict[str, Any]]] = []
    for tool in body.get("tools") or ():
        fn = tool.get("function") if isinstance(tool, dict) else None
        if isinstance(fn, dict) and isinstance(fn.get("name"), str):
            params = fn.get("parameters")
            out.append((fn["name"], params if isinstance(params, dict) else {}))
    return out


def _props(params: dict[str, Any]) -> dict[str, Any]:
    props = params.get("properties")
    return props if isinstance(props, dict) else {}


def _required(params: dict[str, Any]) -> set[str]:
    req = params.get("required")
    return {r for r in req if isinstance(r, str)} if isinstance(req, list) else set()


def _key(props: dict[str, Any], names: tuple[str, ...]) -> str | None:
    return next((k for k in names if k in props), None)


def _fits(params: dict[str, Any], given: set[str]) -> bool:
    """Every required parameter is one the call gives."""
    return _required(params) <= given


def _write_call(name: str, params: dict[str, Any], path: str, content: str) -> Call | None:
    props = _props(params)
    pk, ck = _key(props, _PATH_KEYS), _key(props, _CONTENT_KEYS)
    if pk is None or ck is None or not _fits(params, {pk, ck}):
        return None
    return Call(name, {pk: path, ck: content})


def _patch_call(name: str, params: dict[str, Any], path: str, content: str) -> Call | None:
    props = _props(params)
    key = "input" if "input" in props else "patch" if "patch" in props else None
    if key is None or not _fits(params, {key}):
        return None
    lines = "".join(f"+{line}\n" for line in content.split("\n"))
    return Call(name, {key: f"*** Begin Patch\n*** Add File: {path}\n{lines}*** End Patch\n"})


def _shell_call(name: str, params: dict[str, Any], command: str,
                cwd: str | None) -> Call | None:
    props = _props(params)
    if "cmd" in props:  # Codex's exec_command
        args: dict[str, Any] = {"cmd": command}
    elif "command" in props:
        kind = props["command"].get("type") if isinstance(props["command"], dict) else None
        # Codex's older "shell" takes argv; Claude Code's Bash and OpenCode's bash a string
        args = {"command": ["bash", "-lc", command] if kind == "array" else command}
    else:
        return None
    if "workdir" in props and cwd:
        args["workdir"] = cwd
    if "description" in props:  # OpenCode's bash requires one; Claude Code's shows it
        args["description"] = "Run the requested command"
    if not _fits(params, set(args)):
        return None
    return Call(name, args)


def _find(functions: list[tuple[str, dict[str, Any]]], names: tuple[str, ...]
          ) -> list[tuple[str, dict[str, Any]]]:
    """The functions among ``functions`` named one of ``names`` (any case), in that order."""
    by_name = {n.lower(): (n, p) for n, p in functions}
    return [by_name[n] for n in names if n in by_name]


def _absolute(path: str, cwd: str | None) -> str | None:
    if path.startswith("/"):
        return path
    if path.startswith("~") or cwd is None:
        return None
    return posixpath.normpath(posixpath.join(cwd, path))


def _write_command(path: str, content: str) -> str:
    return f"printf '%s\\n' {shlex.quote(content)} > {shlex.quote(path)}"


def agent_call(body: dict[str, Any]) -> Call | None:
    """The tool call that does what the latest instruction asks, or None (module docstring)."""
    messages = body.get("messages") or []
    if not isinstance(messages, list) or body.get("tool_choice") == "none" \
            or finished(messages):
        return None
    latest = _latest_instruction(messages)
    task = parse_task(latest[1]) if latest else None
    functions = _functions(body)
    if task is None or not functions:
        return None
    cwd = working_directory(body)
    if task.kind == "write":
        content = task.content if task.content.endswith("\n") else task.content + "\n"
        absolute = _absolute(task.path, cwd)
        for name, params in _find(functions, WRITE_TOOLS):
            # the agents' write tools want an absolute path: without a known
            # working directory, the shell writes it relative to the agent's
            call = _write_call(name, params, absolute, content) if absolute else None
            if call is not None:
                return call
        for name, params in _find(functions, PATCH_TOOLS):
            call = _patch_call(name, params, task.path, task.content)
            if call is not None:
                return call
        command = _write_command(task.path, task.content)
    else:
        command = task.command
    for name, params in _find(functions, SHELL_TOOLS):
        call = _shell_call(name, params, command, cwd)
        if call is not None:
            return call
    return None


def done_text(model: str, messages: list[Any]) -> str:
    """The short final answer once the tool's result is back."""
    latest = _latest_instruction(messages)
    task = parse_task(latest[1]) if latest else None
    results = [_text(m.get("content")) for m in messages
               if isinstance(m, dict) and m.get("role") == "tool"]
    said = " ".join((results[-1] if results else "").split())
    said = said if len(said) <= 80 else said[:77] + "..."
    if task is not None and task.kind == "write":
        return f"[sim:{model}] asked to write {task.path}; the tool said: {said}"
    if task is not None:
        return f"[sim:{model}] asked to run `{task.command}`; the tool said: {said}"
    return f"[sim:{model}] tool result: {said}"
