"""The seam's ids for answers whose route gave none (a local model, a route that sends no
id): unique across processes, as an API's are. They were a clock's nanoseconds, which two
processes answering at the same instant shared; logs and spend records keyed on ids merged
their answers."""

from __future__ import annotations

import re
import subprocess
import sys

from llmguard_sdk.transport._wire import new_id

_DRAW = "from llmguard_sdk.transport._wire import new_id\nprint(new_id('chatcmpl'))"


def test_an_answer_id_keeps_its_kind_and_is_the_seams_own() -> None:
    assert re.fullmatch(r"chatcmpl-llmguard-[0-9a-f]{32}", new_id("chatcmpl"))
    assert re.fullmatch(r"msg-llmguard-[0-9a-f]{32}", new_id("msg"))


def test_ids_differ_within_a_process_and_across_processes() -> None:
    here = {new_id("chatcmpl") for _ in range(10_000)}
    assert len(here) == 10_000
    theirs = {
        subprocess.run(
            [sys.executable, "-c", _DRAW], capture_output=True, text=True, check=True, timeout=60
        ).stdout.strip()
        for _ in range(2)
    }
    assert len(theirs) == 2
    assert not theirs & here
    # each process begins with a random part of its own, not the clock: no two share a head
    heads = {answer_id[: len("chatcmpl-llmguard-") + 16] for answer_id in theirs}
    assert len(heads) == 2
