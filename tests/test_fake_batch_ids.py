"""The fake's batch APIs name their batches, files and rows as the real APIs do: OpenAI's
``batch_`` and ``batch_req_`` (each followed by 32 hex digits, a row's unique in every
batch: the rows were ``batch_req_0``, ``batch_req_1`` in each), ``file-`` ids, a row's
``request_id`` shaped as the ``x-request-id`` header (``req_`` and 32 hex digits; it was
``r0``); Anthropic's ``msgbatch_01`` and 22 base58 characters."""

from __future__ import annotations

import json
import re
from typing import Any

import anthropic
import openai

from llmguard_sdk.testing import FakeProvider

BASE58 = "[1-9A-HJ-NP-Za-km-z]"


def _openai_rows(oai: openai.OpenAI) -> tuple[str, str, list[dict[str, object]]]:
    lines = "".join(
        json.dumps(
            {
                "custom_id": text,
                "method": "POST",
                "url": "/v1/chat/completions",
                "body": {"model": "m", "messages": [{"role": "user", "content": text}]},
            }
        )
        + "\n"
        for text in ("one", "two")
    )
    uploaded = oai.files.create(file=("b.jsonl", lines.encode()), purpose="batch")
    created = oai.batches.create(
        input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h"
    )
    output = oai.batches.retrieve(created.id).output_file_id
    assert output is not None
    rows = [json.loads(line) for line in oai.files.content(output).text.splitlines()]
    return created.id, uploaded.id, rows


def test_openai_batch_ids_have_the_api_s_shape(fake: FakeProvider, oai: openai.OpenAI) -> None:
    fake.batch_seconds = 0.0
    first, uploaded, rows = _openai_rows(oai)
    second, _, more = _openai_rows(oai)
    assert re.fullmatch(r"batch_[0-9a-f]{32}", first)
    assert re.fullmatch(r"file-[1-9A-HJ-NP-Za-km-z]{22}", uploaded)
    ids = [str(row["id"]) for row in rows + more]
    assert all(re.fullmatch(r"batch_req_[0-9a-f]{32}", i) for i in ids)
    assert len(set(ids)) == 4
    for row in rows:
        response = row["response"]
        assert isinstance(response, dict)
        assert re.fullmatch(r"req_[0-9a-f]{32}", response["request_id"])
    assert first != second


def test_anthropic_batch_ids_have_the_api_s_shape(
    fake: FakeProvider, claude: anthropic.Anthropic
) -> None:
    fake.batch_seconds = 0.0
    params: Any = {"model": "m", "max_tokens": 20, "messages": [{"role": "user", "content": "hi"}]}
    batch = claude.messages.batches.create(requests=[{"custom_id": "a", "params": params}])
    assert re.fullmatch(f"msgbatch_01{BASE58}{{22}}", batch.id)
    assert claude.messages.batches.retrieve(batch.id).id == batch.id
