"""Hypothesis strategies: tensors built from raw bytes (every bit pattern possible: NaN payloads,
-0.0, subnormals, inf) with an independent numpy model of their expected bytes.

A ``Case`` holds the raw bytes, the base shape, the dtype and a view op applied to make the input
non-contiguous. ``case.tensor()`` builds the torch input; ``case.expected_bytes()`` computes the
logical content with numpy on a ``uint8`` array of shape ``(*shape, itemsize)`` (no torch copy path
involved), so the comparison cannot share a bug with the transport.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass

import numpy as np
import torch
from hypothesis import strategies as st

DTYPES: tuple[torch.dtype, ...] = (
    torch.float32, torch.float16, torch.bfloat16, torch.float8_e4m3fn, torch.float8_e5m2, torch.int8,
    torch.int16, torch.int32, torch.int64, torch.uint8, torch.bool, torch.complex64,
)
VIEW_OPS = ("none", "transpose", "step", "expand", "conj")


@dataclass(frozen=True)
class Case:
    raw: bytes
    shape: tuple[int, ...]
    dtype: torch.dtype
    op: str = "none"

    def __repr__(self) -> str:  # raw can be > 8 MiB: show a digest, never the bytes
        digest = hashlib.sha256(self.raw).hexdigest()[:16]
        head = self.raw[:16].hex()
        return f"Case(dtype={self.dtype}, shape={self.shape}, op={self.op!r}, raw[:16]={head}, sha256={digest})"

    @property
    def itemsize(self) -> int:
        return torch.empty((), dtype=self.dtype).element_size()

    def base(self) -> torch.Tensor:
        flat = torch.frombuffer(bytearray(self.raw), dtype=torch.uint8) if self.raw else torch.empty(
            0, dtype=torch.uint8)
        return flat.view(self.dtype).reshape(self.shape)

    def tensor(self) -> torch.Tensor:
        t = self.base()
        if self.op == "transpose":
            return t.transpose(0, t.dim() - 1)
        if self.op == "step":
            return t[::2]
        if self.op == "expand":
            return t.unsqueeze(0).expand(3, *t.shape)
        if self.op == "conj":
            return t.conj()
        return t

    def expected_bytes(self) -> bytes:
        b = np.frombuffer(self.raw, dtype=np.uint8).reshape(*self.shape, self.itemsize)
        if self.op == "transpose":
            b = np.swapaxes(b, 0, len(self.shape) - 1)
        elif self.op == "step":
            b = b[::2]
        elif self.op == "expand":
            b = np.broadcast_to(b[None], (3, *b.shape))
        elif self.op == "conj":  # complex64 little-endian: flip the sign bit of the imaginary float32
            b = b.copy()
            b[..., 7] ^= 0x80
        return np.ascontiguousarray(b).tobytes()

    def expected_shape(self) -> tuple[int, ...]:
        return tuple(self.tensor().shape)


def _ops_for(dtype: torch.dtype, shape: tuple[int, ...]) -> list[str]:
    ops = ["none", "expand"]
    if len(shape) >= 1:
        ops.append("step")
    if len(shape) >= 2:
        ops.append("transpose")
    if dtype == torch.complex64:
        ops.append("conj")
    return ops


shapes = st.one_of(
    st.just(()),  # 0-d
    st.lists(st.integers(0, 5), min_size=1, max_size=4).map(tuple),  # includes zero-size and 1-element
)


@st.composite
def cases(draw: st.DrawFn, dtypes: tuple[torch.dtype, ...] = DTYPES) -> Case:
    dtype = draw(st.sampled_from(dtypes))
    shape = draw(shapes)
    size = torch.empty((), dtype=dtype).element_size()
    n = math.prod(shape) * size
    if dtype == torch.bool:  # only 0x00/0x01 are valid bool bit patterns in torch
        raw = bytes(draw(st.lists(st.integers(0, 1), min_size=n, max_size=n)))
    else:
        raw = draw(st.binary(min_size=n, max_size=n))
    return Case(raw, shape, dtype, draw(st.sampled_from(_ops_for(dtype, shape))))


@st.composite
def large_cases(draw: st.DrawFn) -> Case:
    """> 8 MiB tensors; bytes from a seeded generator (st.binary cannot draw that much)."""
    dtype = draw(st.sampled_from((torch.float32, torch.bfloat16, torch.float8_e5m2, torch.complex64)))
    size = torch.empty((), dtype=dtype).element_size()
    rows = draw(st.integers(8 * 1024 * 1024 // (1024 * size) + 1, 8 * 1024 * 1024 // (1024 * size) + 64))
    shape = (rows, 1024)
    raw = np.random.default_rng(draw(st.integers(0, 2**32 - 1))).bytes(rows * 1024 * size)
    return Case(raw, shape, dtype, draw(st.sampled_from(_ops_for(dtype, shape))))
