"""Tool calls through a chat template: which templates render tools, and reading the calls back.

A policy can take OpenAI ``tools`` only when its tokenizer's chat template renders them (Qwen3's
does; SmolLM2-135M-Instruct's does not) and when ratchet can read the calls the model writes back.
:func:`template_tool_format` decides both by rendering a probe: the template must put the probe
tool's name into the prompt and ask for calls in ``<tool_call>{json}</tool_call>`` blocks
(``"hermes"``: the format of the Qwen2.5/Qwen3 templates). :func:`parse_tool_calls` turns a
completion in that format into OpenAI ``tool_calls`` (``arguments`` a JSON string) and the text
outside the blocks.

Deliberately left out: forcing a call (``tool_choice: "required"`` or a named function needs
constrained decoding, which no engine here does: refused by the route), other call formats
(a template that renders tools but asks for another format is treated as rendering none), and
streaming a call token by token (a streamed tool request is answered after the whole completion).

A block the model wrote that is not a strict-JSON call to an offered tool (a name that is a list
or an object, arguments that are not JSON, hold NaN/Infinity or a lone surrogate, or nest deeper
than ``MAX_ARGUMENTS_DEPTH``) is not a call: it stays in the reply's text, so such a reply is
plain content (finish ``stop``), never an error; ``arguments`` sent out are always strict JSON.
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass, field
from typing import Any, Literal

from deploy.replica.api import MAX_ARGUMENTS_CHARS, json_problem

ToolFormat = Literal["hermes"]

_PROBE_NAME = "ratchet_probe_tool_7f3a"
_PROBE = {
    "type": "function",
    "function": {
        "name": _PROBE_NAME,
        "description": "probe",
        "parameters": {"type": "object", "properties": {}},
    },
}
_BLOCK = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.DOTALL)


def template_tool_format(tokenizer: Any) -> ToolFormat | None:
    """``"hermes"`` when ``tokenizer``'s chat template renders a tool's definition into the prompt
    and asks for ``<tool_call>`` blocks; None when it has no template, ignores ``tools``, or asks
    for a format this module cannot read."""
    template = getattr(tokenizer, "chat_template", None)
    if not isinstance(template, str) or "<tool_call>" not in template:
        return None
    try:
        text = tokenizer.apply_chat_template(
            [{"role": "user", "content": "x"}], tools=[_PROBE], tokenize=False,
            add_generation_prompt=True,
        )
    except Exception:  # a template that raises on tools (jinja errors of any kind) renders none
        return None
    return "hermes" if isinstance(text, str) and _PROBE_NAME in text else None


@dataclass
class ParsedReply:
    """A completion read for tool calls: ``content`` is the text outside the call blocks (None when
    nothing else was written) and ``tool_calls`` OpenAI's objects (empty when no block parsed)."""

    content: str | None
    tool_calls: list[dict] = field(default_factory=list)


MAX_ARGUMENTS_DEPTH = 32
"""Deepest nesting of a call's ``arguments`` (written by the model or sent in the history)."""


def _no_constants(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def strict_loads(text: str) -> Any:
    """``text`` as strict JSON: NaN/Infinity, nesting that exhausts the stack and invalid text are
    all a ``ValueError``."""
    try:
        return json.loads(text, parse_constant=_no_constants)
    except RecursionError:
        raise ValueError("nested too deeply") from None


def arguments_problem(arguments: Any, path: str = "arguments") -> str | None:
    """Why ``arguments`` (decoded) cannot be a call's arguments, or None: a lone surrogate,
    NaN/Infinity or nesting deeper than ``MAX_ARGUMENTS_DEPTH``."""
    found = json_problem(arguments, path, max_depth=MAX_ARGUMENTS_DEPTH)
    return None if found is None else f"{found[0]}: {found[2]}"


def _call(name: str, arguments: dict) -> dict:
    return {
        "id": f"call_{uuid.uuid4().hex[:24]}",
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(arguments, ensure_ascii=False,
                                                           allow_nan=False)},
    }


def _read_block(raw: str, names: set[str]) -> dict | None:
    """One block's call, or None when it is not a call to an offered tool with object
    arguments in strict JSON (that block is then left in the text, as the model wrote it): a
    name that is not a string, arguments with NaN/Infinity, a lone surrogate or too deep."""
    try:
        obj = strict_loads(raw)
    except ValueError:
        return None
    if not isinstance(obj, dict):
        return None
    name = obj.get("name")
    if not isinstance(name, str) or name not in names:
        return None
    arguments = obj.get("arguments", {})
    if isinstance(arguments, str):  # some models write the arguments as a JSON string
        try:
            arguments = strict_loads(arguments)
        except ValueError:
            return None
    if not isinstance(arguments, dict) or arguments_problem(arguments):
        return None
    return _call(name, arguments)


def parse_tool_calls(text: str, names: set[str] | frozenset[str]) -> ParsedReply:
    """``text`` (a completion in the hermes format) as content and calls to the tools ``names``.

    Every ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` block naming an offered tool
    becomes a call, in order; a block that does not parse, or names a tool not offered, stays in
    the content. An unclosed block (a completion cut by ``max_tokens``) is content."""
    calls: list[dict] = []
    kept: list[str] = []
    at = 0
    for match in _BLOCK.finditer(text):
        call = _read_block(match.group(1), set(names))
        if call is None:
            continue
        kept.append(text[at:match.start()])
        at = match.end()
        calls.append(call)
    kept.append(text[at:])
    content = "".join(kept).strip() if calls else text
    return ParsedReply(content or None, calls)


class ToolTurnError(ValueError):
    """A tool turn in the history that cannot be rendered; ``param`` names it."""

    def __init__(self, message: str, param: str) -> None:
        super().__init__(f"{param}: {message}")
        self.param = param


def template_messages(messages: list[Any]) -> list[dict]:
    """OpenAI chat messages (``deploy.replica.api.ChatMessage``) as a chat template reads them:
    ``developer`` is ``system``; an assistant turn's ``tool_calls`` keep OpenAI's shape with
    ``arguments`` decoded to an object (a :class:`ToolTurnError` when it is not JSON); a tool
    turn keeps ``tool_call_id``."""
    out = []
    for i, m in enumerate(messages):
        extra = m.model_extra or {}
        item: dict[str, Any] = {"role": "system" if m.role == "developer" else m.role,
                                "content": m.text()}
        calls = extra.get("tool_calls")
        if calls:
            if not isinstance(calls, list):
                raise ToolTurnError("must be a list of tool calls", f"messages.{i}.tool_calls")
            item["tool_calls"] = []
            for j, c in enumerate(calls):
                try:
                    item["tool_calls"].append(_template_call(c))
                except ValueError as exc:
                    raise ToolTurnError(str(exc), f"messages.{i}.tool_calls.{j}") from None
        if m.role == "tool" and extra.get("tool_call_id"):
            item["tool_call_id"] = extra["tool_call_id"]
        if m.name:
            item["name"] = m.name
        out.append(item)
    return out


def _template_call(call: Any) -> dict:
    if not isinstance(call, dict) or not isinstance(call.get("function"), dict):
        raise ValueError("each tool call needs a 'function' object")
    function = call["function"]
    name, arguments = function.get("name"), function.get("arguments", "{}")
    if not isinstance(name, str) or not name:
        raise ValueError("each tool call needs 'function.name'")
    if isinstance(arguments, str):
        if len(arguments) > MAX_ARGUMENTS_CHARS:
            raise ValueError(f"'function.arguments' of {name!r} is longer than "
                             f"{MAX_ARGUMENTS_CHARS} characters")
        try:
            arguments = strict_loads(arguments)
        except ValueError as exc:
            raise ValueError(f"'function.arguments' of {name!r} is not JSON ({exc})") from None
    problem = arguments_problem(arguments, "function.arguments")
    if problem:
        raise ValueError(problem)
    return {"id": call.get("id"), "type": "function",
            "function": {"name": name, "arguments": arguments}}
