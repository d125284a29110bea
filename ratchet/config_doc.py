"""The config reference, generated from the pydantic models: every field, its default, bounds and
doc, one table per section. ``python -m ratchet.config_doc > docs/CONFIG.md`` regenerates it, and
a test fails when the checked-in file is stale.

Deliberately left out: prose about what the settings mean together (README, each stage's module
docstring).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from types import UnionType
from typing import Annotated, Literal, Union, get_args, get_origin

from pydantic import BaseModel
from pydantic.fields import FieldInfo

from ratchet.config import RatchetConfig

_ROOT = Path(__file__).resolve().parent.parent
_BOUNDS = (("ge", "≥"), ("gt", ">"), ("le", "≤"), ("lt", "<"), ("min_length", "len ≥"),
           ("max_length", "len ≤"))


def _type_name(annotation: object) -> str:
    origin = get_origin(annotation)
    if origin is Annotated:
        return _type_name(get_args(annotation)[0])
    if origin is Literal:
        return " \\| ".join(json.dumps(a) for a in get_args(annotation))
    if origin in (Union, UnionType):
        return " \\| ".join(_type_name(a) for a in get_args(annotation))
    if origin is not None:
        inner = ", ".join(_type_name(a) for a in get_args(annotation))
        return f"{getattr(origin, '__name__', str(origin))}[{inner}]"
    return getattr(annotation, "__name__", str(annotation))


def _bounds(field: FieldInfo) -> str:
    out = []
    for meta in field.metadata:
        for attr, symbol in _BOUNDS:
            value = getattr(meta, attr, None)
            if value is not None:
                out.append(f"{symbol} {value}")
    return ", ".join(out)


def _default(field: FieldInfo) -> str:
    if field.default_factory is not None:
        value = field.default_factory()
        return "(section)" if isinstance(value, BaseModel) else f"`{value!r}`"
    if field.is_required():
        return "required"
    value = field.default
    if isinstance(value, BaseModel):
        return "(section)"
    if isinstance(value, Path) and value.is_absolute():
        value = value.relative_to(_ROOT) if value.is_relative_to(_ROOT) else value
    return f"`{json.dumps(value, default=str)}`"


def _models_in(annotation: object) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    found = []
    for arg in get_args(annotation):
        for inner in _models_in(arg):
            if inner not in found:
                found.append(inner)
    return found


def sections(model: type[BaseModel], path: str = "") -> list[tuple[str, type[BaseModel]]]:
    """(dotted path, model) for the top model and every nested section, depth first."""
    out = [(path or "(top level)", model)]
    for name, field in model.model_fields.items():
        for sub in _models_in(field.annotation):
            label = f"{path}.{name}" if path else name
            if len(_models_in(field.annotation)) > 1:
                label += f" (type: {sub.__name__})"
            out += sections(sub, label)
    return out


def render(model: type[BaseModel] = RatchetConfig) -> str:
    lines = ["# Configuration reference", "",
             "Generated from the pydantic models by `python -m ratchet.config_doc`; do not edit.",
             "`ratchet config show [--config F]` prints the resolved values. Unknown keys fail.",
             ""]
    for path, sub in sections(model):
        lines += [f"## `{path}` — {sub.__name__}", ""]
        doc = (sub.__doc__ or "").strip().splitlines()
        if doc:
            lines += [doc[0], ""]
        lines += ["| field | type | default | bounds | description |", "|---|---|---|---|---|"]
        for name, field in sub.model_fields.items():
            desc = " ".join((field.description or "").split()).replace("|", "\\|")
            if not desc and _models_in(field.annotation):
                desc = "see its section below"
            lines.append(f"| `{name}` | {_type_name(field.annotation)} | {_default(field)} | "
                         f"{_bounds(field)} | {desc} |")
        lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.stdout.write(render())
