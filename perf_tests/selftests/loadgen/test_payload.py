"""Request bodies: exact-length sampling, data-URL images, noise vs repeated, deterministic per seed."""

from __future__ import annotations

import base64
import io
import json

from PIL import Image

from engine_fixtures.loadgen import WorkloadSpec
from engine_fixtures.loadgen.payload import build_bodies


def _images(body: bytes) -> list[str]:
    content = json.loads(body)["messages"][0]["content"]
    return [part["image_url"]["url"] for part in content if part["type"] == "image_url"]


def test_body_fields_and_images() -> None:
    spec = WorkloadSpec(
        num_requests=3,
        concurrency=1,
        warmup_requests=1,
        images_per_request=2,
        image_resolution=(40, 30),
        image_format="jpeg",
        input_tokens=20,
        output_tokens=7,
        model="m",
    )
    bodies = build_bodies(spec)
    assert len(bodies) == 4
    body = json.loads(bodies[0])
    assert body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}
    assert (body["max_tokens"], body["ignore_eos"], body["temperature"], body["model"]) == (7, True, 0, "m")
    text = body["messages"][0]["content"][-1]["text"]
    assert 20 <= len(text.split()) <= 24
    urls = _images(bodies[0])
    assert len(urls) == 2
    assert urls[0].startswith("data:image/jpeg;base64,")
    image = Image.open(io.BytesIO(base64.b64decode(urls[0].split(",", 1)[1])))
    assert (image.format, image.size) == ("JPEG", (40, 30))


def test_noise_is_fresh_repeated_is_shared_and_seeded() -> None:
    noise = WorkloadSpec(num_requests=3, concurrency=1, image_resolution=(16, 16))
    urls = [_images(b)[0] for b in build_bodies(noise)]
    assert len(set(urls)) == 3
    assert build_bodies(noise) == build_bodies(noise)
    repeated = WorkloadSpec(num_requests=3, concurrency=1, image_resolution=(16, 16), image_content="repeated")
    assert len({_images(b)[0] for b in build_bodies(repeated)}) == 1
    other_seed = WorkloadSpec(num_requests=3, concurrency=1, image_resolution=(16, 16), seed=1)
    assert _images(build_bodies(other_seed)[0]) != _images(build_bodies(noise)[0])
