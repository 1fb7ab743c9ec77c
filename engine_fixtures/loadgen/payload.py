"""Request bodies for ``/v1/chat/completions``, serialised to bytes once, before the clock starts."""

from __future__ import annotations

import json
import random

from engine_fixtures.loadgen.images import image_urls
from engine_fixtures.loadgen.workload import WorkloadSpec

# Common one-token English words: the filler is roughly one token per word for BPE tokenizers.
_WORD_TEXT = (
    "the of and to in is was for on that with as by at from his her an it be are this which or had not "
    "but have were one all their they there been has when who will more no if out so said what up its "
    "about into than them can only other new some could time these two may then do first any my now"
)
_WORDS = tuple(str.split(_WORD_TEXT))


def filler_text(rng: random.Random, approx_tokens: int) -> str:
    """About ``approx_tokens`` tokens of seeded filler words."""
    return " ".join(rng.choice(_WORDS) for _ in range(approx_tokens))


def build_body(spec: WorkloadSpec, index: int, text: str, urls: tuple[str, ...]) -> bytes:
    """One streaming chat request with exact output length (max_tokens + ignore_eos + temperature 0)."""
    content: list[dict[str, object]] = [{"type": "image_url", "image_url": {"url": url}} for url in urls]
    content.append({"type": "text", "text": f"Request {index}. {text}"})
    body = {
        "model": spec.model,
        "messages": [{"role": "user", "content": content}],
        "stream": True,
        "stream_options": {"include_usage": True},
        "max_tokens": spec.output_tokens,
        "ignore_eos": True,
        "temperature": 0,
    }
    return json.dumps(body, separators=(",", ":")).encode()


def build_bodies(spec: WorkloadSpec) -> list[bytes]:
    """``spec.total_requests`` bodies (warmup first), deterministic for a given ``spec.seed``."""
    rng = random.Random(spec.seed)
    urls = image_urls(
        spec.total_requests,
        spec.images_per_request,
        spec.image_resolution,
        spec.image_content,
        spec.image_format,
        spec.seed,
    )
    return [build_body(spec, i, filler_text(rng, spec.input_tokens), urls[i]) for i in range(spec.total_requests)]
