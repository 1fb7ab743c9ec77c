"""The transport findings, one concrete input each, against the INSTALLED release's own code path.

The bitwise properties (perf_tests/sglang/transport) find these by search and check them strictly where a drawn case
hits one; here each is stated once, deterministically, through SGLang's own ``_wrap_shm_or_inline`` (the
function ``wrap_shm_features`` calls per tensor, whose fallback to inline transport catches only ``OSError``).
A release that accepts one of these inputs fails here (strict): then drop it from
``perf_tests/sglang/transport/test_roundtrip.py::sglang_known_failure`` and from the README's findings.
"""

from __future__ import annotations

import importlib
import os
import pickle
import warnings

import pytest
import torch

from engine_fixtures import sglang_version
from engine_fixtures.transport.arms import SGLANG_PREFIX
from engine_fixtures.transport.shm import list_segments

pytestmark = pytest.mark.sglang

FINDINGS = {
    # SharedMemory(size=0) raises ValueError, which the OSError fallback does not catch: the request fails
    "zero-size tensor": (lambda: torch.empty(0, 3), ValueError, "zero"),
    # tensor.view(torch.uint8) of a 0-d tensor wider than a byte
    "0-d tensor wider than a byte": (lambda: torch.tensor(1.5), RuntimeError, "cannot be 0 to view"),
    # a size-1 last dim with stride 3 counts as contiguous, so .contiguous() keeps it and view(uint8) fails
    "size-1 last dim with stride != 1": (lambda: torch.arange(3.0).reshape(1, 3).transpose(0, 1), RuntimeError,
                                         r"stride\(-1\) must be 1"),
    # .contiguous() keeps the conjugate bit; view(uint8) refuses it
    "conjugate view": (lambda: torch.tensor([1 + 2j], dtype=torch.complex64).conj(), RuntimeError,
                       "not supported for conjugate view"),
}


def wrap_shm_or_inline():  # type: ignore[no-untyped-def]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return importlib.import_module(sglang_version.MM_UTILS_MODULE)._wrap_shm_or_inline


def wrap_expecting_rejection(tensor: torch.Tensor, finding: str) -> None:
    handle = wrap_shm_or_inline()(tensor)
    pytest.fail(f"sglang {sglang_version.installed()} now accepts a {finding} (got {type(handle).__name__}): "
                "drop it from sglang_known_failure and the README's findings")


@pytest.mark.parametrize("finding", FINDINGS)
def test_sglang_copy_path_still_rejects(finding: str) -> None:
    make, error, match = FINDINGS[finding]
    tensor = make()
    # SGLang names its segments sgl_shm_mm_<creator pid>_<hex>: only this process's count (a suite beside this one
    # makes its own; a loaded CI run went red on a neighbour's segment appearing meanwhile)
    ours = f"{SGLANG_PREFIX}{os.getpid()}_"
    before = list_segments(ours)
    with pytest.raises(error, match=match):
        wrap_expecting_rejection(tensor, finding)
    assert list_segments(ours) == before, f"a failed {finding} left a segment behind"


def test_a_plain_tensor_crosses_through_shm() -> None:
    """The control: the same call with an ordinary tensor returns SGLang's SHM handle, not the inline tensor."""
    handle = wrap_shm_or_inline()(torch.arange(12.0).reshape(3, 4))
    assert type(handle).__name__ == sglang_version.SHM_CLASS
    assert torch.equal(pickle.loads(pickle.dumps(handle)).materialize(), torch.arange(12.0).reshape(3, 4))
