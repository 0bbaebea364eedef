"""The building blocks of the OpenAPI document (``http/openapi.py``).

JSON Schema constructors (``obj``, ``arr``, ``ref``), the request bodies with
the limits the decoders enforce (``CHAT_REQUEST``, ``MESSAGES_REQUEST``, ...),
the answers' component ``SCHEMAS`` and the helpers that assemble one operation
(``answer``, ``errors``, ``query``, ``path_param``, ``body``, ``op``).
"""

from __future__ import annotations

from typing import Any

from humpyard.overrides import KINDS
from humpyard.protocols import anthropic, openai, responses_request

Schema = dict[str, Any]

STR: Schema = {"type": "string"}
NONEMPTY: Schema = {"type": "string", "minLength": 1}
INT: Schema = {"type": "integer"}
NUM: Schema = {"type": "number"}
BOOL: Schema = {"type": "boolean"}
ANY_OBJECT: Schema = {"type": "object"}
OPT_STR: Schema = {"type": ["string", "null"]}
OPT_NUM: Schema = {"type": ["number", "null"]}


def obj(props: dict[str, Schema], *required: str, extra: bool = True) -> Schema:
    out: Schema = {"type": "object", "properties": props}
    if required:
        out["required"] = list(required)
    if not extra:
        out["additionalProperties"] = False
    return out


def arr(items: Schema, **limits: int) -> Schema:
    return {"type": "array", "items": items, **limits}


def ref(name: str) -> Schema:
    return {"$ref": f"#/components/schemas/{name}"}


# -- request bodies: the limits are the decoders' own --------------------------

TOKENS: Schema = {"type": "integer", "minimum": 0, "maximum": openai.MAX_TOKENS_LIMIT}
SAMPLING: Schema = {"type": "number", "minimum": 0, "maximum": 100}
CHAT_MESSAGE = obj({"role": {"enum": sorted(openai.ROLES)},
                    "content": {"type": ["string", "array", "null"]},
                    "name": STR, "tool_call_id": STR, "tool_calls": arr(ANY_OBJECT)}, "role")
CHAT_REQUEST = obj({
    "model": NONEMPTY,
    "messages": arr(CHAT_MESSAGE, minItems=1, maxItems=openai.MAX_MESSAGES),
    "stream": BOOL, "stream_options": obj({"include_usage": BOOL}),
    "tools": arr(obj({"type": STR, "function": ANY_OBJECT}), maxItems=openai.MAX_TOOLS),
    "tool_choice": {"type": ["string", "object"]},
    "max_tokens": TOKENS, "max_completion_tokens": TOKENS, "n": TOKENS,
    "temperature": SAMPLING, "top_p": SAMPLING,
    "stop": {"type": ["string", "array", "null"]}, "user": STR,
}, "model", "messages")

SOURCE = {"anyOf": [obj({"type": {"const": "base64"}, "media_type": STR, "data": STR},
                        "type", "media_type", "data"),
                    obj({"type": {"const": "url"}, "url": STR}, "type", "url"),
                    obj({"type": {"const": "text"}, "media_type": STR, "data": STR},
                        "type", "data")]}
TEXT_BLOCK = obj({"type": {"const": "text"}, "text": STR}, "type", "text")
IMAGE_BLOCK = obj({"type": {"const": "image"}, "source": SOURCE}, "type", "source")
BLOCK: Schema = {"anyOf": [
    TEXT_BLOCK, IMAGE_BLOCK,
    obj({"type": {"const": "document"}, "source": SOURCE, "title": STR}, "type", "source"),
    obj({"type": {"const": "tool_use"}, "id": STR, "name": STR, "input": ANY_OBJECT},
        "type", "id", "name"),
    obj({"type": {"const": "tool_result"}, "tool_use_id": STR, "is_error": BOOL,
         "content": {"anyOf": [STR, arr({"anyOf": [TEXT_BLOCK, IMAGE_BLOCK]})]}},
        "type", "tool_use_id"),
    obj({"type": {"enum": ["thinking", "redacted_thinking"]}, "thinking": STR}, "type"),
]}
MESSAGES_FIELDS: dict[str, Schema] = {
    "model": NONEMPTY,
    "max_tokens": {"type": "integer", "minimum": 1, "maximum": anthropic.MAX_TOKENS_LIMIT},
    "system": {"anyOf": [STR, arr(TEXT_BLOCK)]},
    "messages": arr(obj({"role": {"enum": ["user", "assistant"]},
                         "content": {"anyOf": [STR, arr(BLOCK)]}}, "role", "content"),
                    minItems=1),
    "temperature": {"type": "number", "minimum": 0, "maximum": 1},
    "top_p": {"type": "number", "minimum": 0, "maximum": 1},
    "top_k": {"type": "integer", "minimum": 0},
    "stop_sequences": arr(STR), "stream": BOOL,
    "tools": arr(obj({"name": STR, "description": STR, "input_schema": ANY_OBJECT,
                      "type": {"const": "custom"}}, "name", "input_schema")),
    "tool_choice": obj({"type": {"enum": ["auto", "any", "tool", "none"]}, "name": STR,
                        "disable_parallel_tool_use": BOOL}, "type"),
    "metadata": obj({"user_id": STR}),
    "thinking": obj({"type": {"enum": ["enabled", "disabled"]},
                     "budget_tokens": {"type": "integer", "minimum": 1}}, "type"),
}
MESSAGES_REQUEST = obj(MESSAGES_FIELDS, "model", "max_tokens", "messages")
# Bedrock's InvokeModel body: Messages without model and stream (the path has them)
BEDROCK_REQUEST = obj({**{k: v for k, v in MESSAGES_FIELDS.items()
                          if k not in ("model", "stream")},
                       "anthropic_version": STR,
                       "anthropic_beta": arr({"type": "string", "minLength": 1,
                                              "maxLength": 128},
                                             maxItems=64)},
                      "max_tokens", "messages")
COUNT_TOKENS_REQUEST = obj(MESSAGES_FIELDS, "model", "messages")
RESPONSES_ITEM = obj({"type": STR, "role": {"enum": list(responses_request.ROLES)},
                      "content": {"type": ["string", "array"]}, "call_id": STR, "name": STR,
                      "arguments": STR, "output": {"type": ["string", "array"]}})
RESPONSES_REQUEST = obj({
    "model": NONEMPTY,
    "input": {"anyOf": [STR, arr(RESPONSES_ITEM, minItems=1)]},
    "instructions": STR, "stream": BOOL, "store": {"const": False},
    "tools": arr(obj({"type": STR, "name": STR, "parameters": ANY_OBJECT}, "type")),
    "tool_choice": {"type": ["string", "object"]}, "parallel_tool_calls": BOOL,
    "max_output_tokens": {"type": "integer", "minimum": 1,
                          "maximum": responses_request.MAX_OUTPUT_TOKENS_LIMIT},
    "temperature": {"type": "number", "minimum": 0, "maximum": 2},
    "top_p": {"type": "number", "minimum": 0, "maximum": 1},
    "reasoning": obj({"effort": {"enum": list(responses_request.REASONING_EFFORTS)},
                      "summary": OPT_STR}),
    "metadata": {"type": "object", "additionalProperties": STR},
    "include": arr(STR), "user": STR, "prompt_cache_key": STR,
}, "model", "input")
EXPLAIN_REQUEST = obj({
    "model": NONEMPTY, "headers": {"type": "object", "additionalProperties": STR},
    "subagent": BOOL, "stream": BOOL, "tools": BOOL, "images": BOOL,
    "prompt_tokens": {"type": "integer", "minimum": 0},
    "max_tokens": {"type": "integer", "minimum": 0},
}, "model", extra=False)
OVERRIDE_REQUEST = obj({
    "kind": {"enum": list(KINDS)}, "subject": NONEMPTY,
    "target": STR, "reason": {"type": "string", "maxLength": 500},
    "expires_in_secs": {"type": "number", "exclusiveMinimum": 0},
}, "kind", "subject", extra=False)

# -- answers ----------------------------------------------------------------------

SCHEMAS: dict[str, Schema] = {
    "Error": obj({"error": obj({"message": STR, "type": STR, "code": OPT_STR},
                               "message", "type", "code")}, "error"),
    "BedrockError": obj({"message": STR}, "message"),
    "AnthropicError": obj({"type": {"const": "error"},
                           "error": obj({"type": STR, "message": STR}, "type", "message")},
                          "type", "error"),
    "ChatCompletion": obj({"id": STR, "object": STR, "model": STR,
                           "choices": arr(ANY_OBJECT), "usage": ANY_OBJECT}, "choices"),
    "Response": obj({"id": STR, "object": {"const": "response"}, "status": STR,
                     "model": STR, "output": arr(ANY_OBJECT), "usage": ANY_OBJECT},
                    "id", "object", "status", "output"),
    "Model": obj({"id": STR, "object": {"const": "model"}, "created": INT, "owned_by": STR,
                  "context_window": INT, "context_length": INT, "max_output_tokens": INT,
                  "capabilities": ANY_OBJECT}, "id", "object"),
    "Message": obj({"id": STR, "type": {"const": "message"}, "role": {"const": "assistant"},
                    "model": STR, "content": arr(ANY_OBJECT), "stop_reason": OPT_STR,
                    "usage": ANY_OBJECT}, "id", "type", "role", "content"),
    "Override": obj({"id": STR, "kind": {"enum": list(KINDS)}, "subject": STR,
                     "target": OPT_STR, "reason": STR, "stale": BOOL,
                     "expires_in_secs": NUM}, "id", "kind", "subject"),
}
ERR, AERR = ref("Error"), ref("AnthropicError")


def answer(schema: Schema | None, description: str, media: str = "application/json",
           ) -> Schema:
    out: Schema = {"description": description}
    if schema is not None:
        out["content"] = {media: {"schema": schema}}
    return out


def errors(*codes: str, anthropic_shape: bool = False) -> dict[str, Schema]:
    shape = AERR if anthropic_shape else ERR
    return {code: answer(shape, "refused or failed; the message says why") for code in codes}


CLIENT_ERRORS = ("400", "401", "403", "404", "413", "429", "431", "4XX", "5XX")
ADMIN_ERRORS = ("400", "401", "403", "404", "431")
# each server-sent event: the OpenAI chunks (or Anthropic events) are in ``data``
SSE = {"text/event-stream": {"schema": obj({"event": STR, "data": STR, "id": STR})}}


def query(name: str, schema: Schema, description: str) -> Schema:
    return {"name": name, "in": "query", "required": False, "schema": schema,
            "description": description}


def path_param(name: str) -> Schema:
    return {"name": name, "in": "path", "required": True, "schema": STR}


BEDROCK_MODEL = {"name": "model", "in": "path", "required": True,
                 "schema": {"type": "string", "minLength": 1, "maxLength": 256},
                 "description": "a route name, or any model id a selector rule routes "
                                "(an inference profile id, an ARN)"}


def body(schema: Schema) -> Schema:
    return {"required": True, "content": {"application/json": {"schema": schema}}}


def op(summary: str, responses: dict[str, Schema], *, request: Schema | None = None,
       params: list[Schema] | None = None, tag: str = "admin") -> Schema:
    out: Schema = {"summary": summary, "tags": [tag], "responses": responses}
    if request is not None:
        out["requestBody"] = body(request)
    if params:
        out["parameters"] = params
    return out


READINESS = obj({"status": STR, "checks": obj(
    {"config": STR, "writer": STR, "store": STR}, "config", "writer", "store")},
    "status", "checks")
