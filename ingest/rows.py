"""Reward rows for many finalised completions at once, column by column.

``reward_table(finals, reward_config)`` gives what ``rows_to_table([reward_row(...) ...])`` gives
(ingest/join.py), without a Python object per token: the completions' own fields (texts, token
ids, logprobs, routed experts, sampling) are parsed from their JSON payloads straight into Arrow
columns by pyarrow's JSON reader, and only the signal columns and the reward are computed per
row in Python (``signal_columns``, the same code ``reward_row`` uses). A batch the JSON reader
refuses (a payload it parses differently from pydantic, e.g. a repeated key) is built row by row
with ``reward_row`` instead, so the rows never depend on which path built them.

Deliberately left out: which completions are final and which signals join (``join_group``).
"""

from __future__ import annotations

import io
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

from ingest.join import reward_row, signal_columns
from ingest.parse import EventItem
from ingest.schema import REWARD_SCHEMA, SCHEMA_VERSION
from rewards.config import RewardConfig

_INTS = pa.list_(pa.int64())
_EXPERTS = pa.list_(pa.list_(pa.list_(pa.int64())))
COMPLETION_FIELDS = pa.schema(
    [
        ("conversation_id", pa.string()),
        ("model_name", pa.string()),
        ("model_version", pa.int64()),
        ("task_kind", pa.string()),
        ("prompt", pa.string()),
        ("response_text", pa.string()),
        ("response_token_ids", _INTS),
        ("response_logprobs", pa.list_(pa.float64())),
        ("routed_experts", _EXPERTS),
        ("sampling", pa.struct([("temperature", pa.float64()), ("top_p", pa.float64())])),
        ("prompt_token_ids", _INTS),
        ("prompt_routed_experts", _EXPERTS),
        ("routed_experts_source", pa.string()),
        ("finish_reason", pa.string()),
        ("latency_ms", pa.float64()),
        ("client_id", pa.string()),
        ("arm", pa.string()),
    ]
)
"""The completion payload's fields a reward row copies, as the JSON reader parses them (64-bit;
cast to ``REWARD_SCHEMA``'s types afterwards, as ``from_pylist`` casts Python values)."""

SIGNAL_FIELDS = [
    f for f in REWARD_SCHEMA if f.name not in COMPLETION_FIELDS.names and f.name not in (
        "schema_version", "response_id", "event_time", "temperature", "top_p", "completion_tokens"
    )
]


def reward_table(
    finals: list[tuple[str, EventItem, list[EventItem]]], reward_config: RewardConfig
) -> pa.Table:
    """``REWARD_SCHEMA`` rows for ``(response_id, completion, joined signals)`` triples."""
    if not finals:
        return REWARD_SCHEMA.empty_table()
    try:
        c = _parse([f[1].value for f in finals])
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
        rows = [reward_row(rid, comp, sigs, reward_config) for rid, comp, sigs in finals]
        return pa.Table.from_pylist(rows, schema=REWARD_SCHEMA)
    n_tokens = pc.list_value_length(c["response_token_ids"]).cast(pa.int32())
    prompts, responses = c["prompt"].to_pylist(), c["response_text"].to_pylist()
    clients = c["client_id"].to_pylist()
    signal_rows = [
        signal_columns(
            sigs,
            reward_config,
            prompt=prompts[i],
            response_text=responses[i],
            n_tokens=n,
            client_id=clients[i],
        )
        for i, ((_, _, sigs), n) in enumerate(zip(finals, n_tokens.to_pylist(), strict=True))
    ]
    signals = pa.Table.from_pylist(signal_rows, schema=pa.schema(SIGNAL_FIELDS))
    sampling = c["sampling"].combine_chunks()
    columns: dict[str, Any] = {
        "schema_version": pa.array([SCHEMA_VERSION] * len(finals), pa.int32()),
        "response_id": pa.array([f[0] for f in finals], pa.string()),
        "event_time": pa.array([f[1].event_time_us for f in finals], pa.int64()),
        "temperature": sampling.field("temperature"),
        "top_p": sampling.field("top_p"),
        "completion_tokens": n_tokens,
        "prompt_token_ids": _none_if_empty(c["prompt_token_ids"]),
        "prompt_routed_experts": _none_if_empty(c["prompt_routed_experts"]),
        "routed_experts_source": pc.fill_null(c["routed_experts_source"], "engine"),
    }
    arrays = []
    for field in REWARD_SCHEMA:
        if field.name in columns:
            col = columns[field.name]
        elif field.name in signals.column_names:
            col = signals.column(field.name)
        else:
            col = c[field.name]
        if field.name == "event_time":
            col = col.cast(pa.timestamp("us")).cast(field.type)
        arrays.append(col.cast(field.type))
    return pa.Table.from_arrays(arrays, schema=REWARD_SCHEMA)


def _parse(payloads: list[bytes]) -> pa.Table:
    """The completions' ``COMPLETION_FIELDS``, one row per payload (other fields ignored)."""
    data = b"\n".join(payloads)
    read = pj.ReadOptions(use_threads=False, block_size=max(1 << 20, 2 * max(map(len, payloads))))
    parse = pj.ParseOptions(
        explicit_schema=COMPLETION_FIELDS,
        unexpected_field_behavior="ignore",
        newlines_in_values=any(b"\n" in p for p in payloads),
    )
    table = pj.read_json(io.BytesIO(data), read_options=read, parse_options=parse)
    if table.num_rows != len(payloads):
        raise pa.ArrowInvalid(f"{table.num_rows} rows from {len(payloads)} payloads")
    return table


def _none_if_empty(col: pa.ChunkedArray) -> pa.ChunkedArray:
    """Null where the list is missing or empty (``c.get(name) or None`` in ``reward_row``)."""
    empty = pc.fill_null(pc.equal(pc.list_value_length(col), 0), True)
    return pc.if_else(empty, pa.scalar(None, col.type), col)
