"""SSE parsing: content detection, usage, chunk splits across reads, and every malformed shape."""

from __future__ import annotations

import pytest

from engine_fixtures.loadgen.sse import SseError, SseParser

ROLE = b'data: {"choices":[{"delta":{"role":"assistant","content":""}}],"usage":null}\n\n'
TOKEN = b'data: {"choices":[{"delta":{"content":"hi"}}],"usage":null}\n\n'
SPACED = b'data: {"choices": [{"delta": {"content": "x"}}]}\n\n'
NULL = b'data: {"choices":[{"delta":{"content":null}}]}\n\n'
USAGE = b'data: {"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2}}\n\n'
DONE = b"data: [DONE]\n\n"


def test_tokens_usage_and_done() -> None:
    parser = SseParser()
    for i, part in enumerate((ROLE, TOKEN, NULL, SPACED, USAGE, DONE)):
        parser.feed(part, float(i))
    parser.finish()
    assert parser.token_times == [1.0, 3.0]
    assert parser.usage_tokens == 2
    assert parser.chunks == 5


def test_split_at_every_byte_gives_same_result() -> None:
    stream = ROLE + TOKEN + TOKEN + USAGE + DONE
    parser = SseParser()
    for i in range(len(stream)):
        parser.feed(stream[i : i + 1], float(i))
    parser.finish()
    assert len(parser.token_times) == 2
    assert parser.usage_tokens == 2


def test_crlf_and_comments_are_accepted() -> None:
    parser = SseParser()
    parser.feed(b": keep-alive\r\n\r\n" + TOKEN.replace(b"\n", b"\r\n") + b"data: [DONE]\r\n\r\n", 1.0)
    parser.finish()
    assert parser.token_times == [1.0]


@pytest.mark.parametrize(
    ("stream", "kind", "text"),
    [
        (TOKEN + b"garbage\n\n" + DONE, "malformed_sse", "not an SSE field"),
        (TOKEN + b"data: not json\n\n" + DONE, "malformed_sse", "not a JSON object"),
        (TOKEN + DONE + TOKEN, "malformed_sse", "after [DONE]"),
        (TOKEN + b'data: {"choices":[],"usage":{"completion_tokens":"x"}}\n\n', "malformed_sse", "usage"),
        (TOKEN + b'data: {"error":{"message":"boom"}}\n\n', "server_error", "error event"),
        (TOKEN + b'data: {"object":"error","message":"boom"}\n\n', "server_error", "error event"),
    ],
)
def test_malformed_streams_raise_with_kind(stream: bytes, kind: str, text: str) -> None:
    parser = SseParser()
    with pytest.raises(SseError) as info:
        parser.feed(stream, 0.0)
    assert info.value.kind == kind
    assert text in str(info.value)


@pytest.mark.parametrize(
    ("stream", "text"), [(TOKEN + USAGE, "without 'data: [DONE]'"), (TOKEN + b"data: {", "inside")]
)
def test_incomplete_streams_fail_on_finish(stream: bytes, text: str) -> None:
    parser = SseParser()
    parser.feed(stream, 0.0)
    with pytest.raises(SseError) as info:
        parser.finish()
    assert text in str(info.value)
