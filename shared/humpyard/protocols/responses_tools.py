"""Responses API tools → OpenAI chat tools, and back for the calls (pure).

Chat completions know one kind of tool, the function. The Responses API also
has ``namespace`` tools (groups of functions; Codex puts its sub-agent tools
in one), ``custom`` tools (free-form text input) and hosted tools the
provider runs itself (``web_search``, ``file_search``, ...). How each is
carried (docs/clients.md, "Codex CLI and the Responses API"):

- ``function``: as is.
- ``namespace``: each member becomes a function named ``<namespace>__<name>``;
  a call of that name goes back as a ``function_call`` with ``namespace``.
- ``custom``: a function taking one string, ``input``; its call goes back
  as a ``custom_tool_call``.
- hosted tools: no upstream behind the gateway runs them. Offered next to the
  client's own function tools (Codex sends ``web_search`` by default) they
  are dropped with a note, so the agent still works, only without them; a
  request that needs one (hosted tools only, or ``tool_choice`` naming one)
  is refused with a 400 that names it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from humpyard.protocols.fields import fail, note, opt_str, req_str

SEPARATOR = "__"
HOSTED_TOOLS = frozenset({
    "web_search", "web_search_preview", "web_search_2025_08_26",
    "web_search_preview_2025_03_11", "file_search", "code_interpreter", "image_generation",
    "computer", "computer_use", "computer_use_preview", "mcp", "local_shell", "shell",
    "apply_patch", "tool_search",
})
CUSTOM_PARAMETERS = {"type": "object", "properties": {"input": {"type": "string"}},
                     "required": ["input"], "additionalProperties": False}


@dataclass(frozen=True)
class ToolName:
    """What one chat function name stands for on the Responses side."""

    name: str
    namespace: str | None = None
    custom: bool = False


@dataclass
class ToolNames:
    """Chat function name → its Responses tool, for encoding calls back."""

    by_chat_name: dict[str, ToolName] = field(default_factory=dict)

    def lookup(self, chat_name: str) -> ToolName:
        """The Responses tool for a chat call's name (a plain function when unknown)."""
        return self.by_chat_name.get(chat_name) or ToolName(chat_name)

    def chat_name(self, name: str, namespace: str | None = None) -> str:
        """The chat function name for a Responses call of ``name`` (in ``namespace``)."""
        return f"{namespace}{SEPARATOR}{name}" if namespace else name


def tool_names(tools: Any) -> ToolNames:
    """The name map of a request's ``tools`` (lenient: skips what it cannot read)."""
    names = ToolNames()
    for tool in tools if isinstance(tools, list) else []:
        if not isinstance(tool, dict):
            continue
        if tool.get("type") == "namespace" and isinstance(tool.get("name"), str):
            for member in tool.get("tools") or []:
                if isinstance(member, dict) and isinstance(member.get("name"), str):
                    chat = names.chat_name(member["name"], tool["name"])
                    names.by_chat_name[chat] = ToolName(member["name"], tool["name"],
                                                        member.get("type") == "custom")
        elif tool.get("type") == "custom" and isinstance(tool.get("name"), str):
            names.by_chat_name[tool["name"]] = ToolName(tool["name"], custom=True)
    return names


def decode_tools(body: dict, out: dict, notes: list[str]) -> None:
    """``tools``, ``tool_choice`` and ``parallel_tool_calls`` into the chat body ``out``."""
    tools = body.get("tools")
    if tools is not None and not isinstance(tools, list):
        fail("tools", "must be a list")
    functions: list[dict] = []
    hosted: list[tuple[int, str]] = []
    for i, tool in enumerate(tools or []):
        path = f"tools[{i}]"
        if not isinstance(tool, dict):
            fail(path, "must be an object")
        kind = req_str(tool, "type", path)
        if kind in ("function", "custom"):
            functions.append(_function(tool, path, None))
        elif kind == "namespace":
            namespace = req_str(tool, "name", path)
            members = tool.get("tools")
            if not isinstance(members, list):
                fail(f"{path}.tools", "must be a list")
            for j, member in enumerate(members):
                mpath = f"{path}.tools[{j}]"
                if not isinstance(member, dict):
                    fail(mpath, "must be an object")
                if req_str(member, "type", mpath) not in ("function", "custom"):
                    fail(f"{mpath}.type", "must be 'function' or 'custom'")
                functions.append(_function(member, mpath, namespace))
        elif kind in HOSTED_TOOLS:
            hosted.append((i, kind))
        else:
            fail(f"{path}.type", f"unknown tool type {kind!r}")
    seen: set[str] = set()
    for tool in functions:
        name = tool["function"]["name"]
        if name in seen:
            fail("tools", f"two tools are named {name!r}")
        seen.add(name)
    if hosted and not functions:
        i, kind = hosted[0]
        fail(f"tools[{i}].type", f"built-in tool {kind!r} is not supported: the gateway's "
                                 "upstreams run no hosted tools; only function, custom and "
                                 "namespace tools are")
    for _, kind in hosted:
        note(notes, "hosted_tool", f"built-in tool {kind!r} dropped: the upstream cannot run it")
    if functions:
        out["tools"] = functions
    _decode_tool_choice(body.get("tool_choice"), seen, out)
    parallel = body.get("parallel_tool_calls")
    if parallel is not None:
        if not isinstance(parallel, bool):
            fail("parallel_tool_calls", "must be a boolean")
        if functions:
            out["parallel_tool_calls"] = parallel


def _function(tool: dict, path: str, namespace: str | None) -> dict:
    name = req_str(tool, "name", path)
    chat_name = f"{namespace}{SEPARATOR}{name}" if namespace else name
    function: dict[str, Any] = {"name": chat_name}
    description = opt_str(tool, "description", path)
    if tool["type"] == "custom":
        grammar = _custom_format(tool, path)
        text = description or ""
        text += f"\n\nPut the whole free-form input in `input`.{grammar}"
        function["description"] = text.strip()
        function["parameters"] = CUSTOM_PARAMETERS
        return {"type": "function", "function": function}
    if description:
        function["description"] = description
    parameters = tool.get("parameters")
    if parameters is not None and not isinstance(parameters, dict):
        fail(f"{path}.parameters", "must be an object (a JSON schema)")
    function["parameters"] = parameters or {"type": "object", "properties": {}}
    strict = tool.get("strict")
    if strict is not None:
        if not isinstance(strict, bool):
            fail(f"{path}.strict", "must be a boolean")
        if strict:
            function["strict"] = True
    return {"type": "function", "function": function}


def _custom_format(tool: dict, path: str) -> str:
    """A custom tool's grammar, as text for the function's description."""
    fmt = tool.get("format")
    if fmt is None:
        return ""
    if not isinstance(fmt, dict):
        fail(f"{path}.format", "must be an object")
    if fmt.get("type") == "grammar":
        syntax = req_str(fmt, "syntax", f"{path}.format")
        definition = req_str(fmt, "definition", f"{path}.format")
        return f" It must match this {syntax} grammar:\n{definition}"
    return ""


def _decode_tool_choice(choice: Any, names: set[str], out: dict) -> None:
    if choice is None:
        return
    if isinstance(choice, str):
        if choice not in ("auto", "none", "required"):
            fail("tool_choice", f"must be auto, none, required or an object, got {choice!r}")
        if choice == "required" and not names:
            fail("tool_choice", "'required' needs at least one function tool in tools")
        if names:
            out["tool_choice"] = choice
        return
    if not isinstance(choice, dict):
        fail("tool_choice", "must be a string or an object")
    kind = req_str(choice, "type", "tool_choice")
    if kind in ("function", "custom"):
        name = req_str(choice, "name", "tool_choice")
        namespace = opt_str(choice, "namespace", "tool_choice")
        chat_name = f"{namespace}{SEPARATOR}{name}" if namespace else name
        if chat_name not in names:
            fail("tool_choice.name", f"no tool named {name!r} in tools")
        out["tool_choice"] = {"type": "function", "function": {"name": chat_name}}
    elif kind in HOSTED_TOOLS:
        fail("tool_choice.type", f"built-in tool {kind!r} is not supported: the gateway's "
                                 "upstreams run no hosted tools")
    else:
        fail("tool_choice.type", f"must be function or custom, got {kind!r}")
