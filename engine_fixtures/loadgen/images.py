"""Synthetic images as base64 data URLs, generated and encoded before any clock starts."""

from __future__ import annotations

import base64
import io

import numpy as np
from PIL import Image

_MIME = {"png": "image/png", "jpeg": "image/jpeg"}


def encode_data_url(pixels: np.ndarray, image_format: str) -> str:
    """Encode an HxWx3 uint8 array as a ``data:image/<fmt>;base64,...`` URL."""
    buffer = io.BytesIO()
    image = Image.fromarray(pixels, mode=None)
    if image_format == "jpeg":
        image.save(buffer, format="JPEG", quality=90)
    else:
        image.save(buffer, format="PNG", compress_level=1)
    return f"data:{_MIME[image_format]};base64,{base64.b64encode(buffer.getvalue()).decode('ascii')}"


def noise_pixels(rng: np.random.Generator, resolution: tuple[int, int]) -> np.ndarray:
    """Uniform RGB noise of ``resolution`` = (width, height): incompressible, defeats any image cache."""
    width, height = resolution
    return rng.integers(0, 256, size=(height, width, 3), dtype=np.uint8)


def image_urls(
    count: int, per_request: int, resolution: tuple[int, int], content: str, image_format: str, seed: int
) -> list[tuple[str, ...]]:
    """``count`` tuples of ``per_request`` data URLs. ``noise``: a fresh image for every slot, derived
    from ``seed``; ``repeated``: the same single image everywhere (exercises prefix/image reuse)."""
    rng = np.random.default_rng(seed)
    if per_request == 0:
        return [() for _ in range(count)]
    if content == "repeated":
        url = encode_data_url(noise_pixels(rng, resolution), image_format)
        return [(url,) * per_request for _ in range(count)]
    return [
        tuple(encode_data_url(noise_pixels(rng, resolution), image_format) for _ in range(per_request))
        for _ in range(count)
    ]
