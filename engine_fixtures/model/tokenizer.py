"""An offline Qwen2-style byte-level BPE tokenizer whose special tokens sit at Qwen's real ids.

No download and no training: the regular vocabulary is the 256 byte-level symbols (so every text encodes,
one token per byte) padded with unreachable filler entries up to id 151642, then the 22 Qwen2 special
tokens from 151643 (``<|endoftext|>``) to 151664, exactly as in the real repos (151655 = ``<|image_pad|>``).
The files are written as JSON directly; the ``tokenizers`` library is only needed to *verify* them.
"""

from __future__ import annotations

from typing import Any

SPECIAL = (
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|object_ref_start|>",
    "<|object_ref_end|>",
    "<|box_start|>",
    "<|box_end|>",
    "<|quad_start|>",
    "<|quad_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|vision_pad|>",
    "<|image_pad|>",
    "<|video_pad|>",
    "<tool_call>",
    "</tool_call>",
    "<|fim_prefix|>",
    "<|fim_middle|>",
    "<|fim_suffix|>",
    "<|fim_pad|>",
    "<|repo_name|>",
    "<|file_sep|>",
)
FIRST_SPECIAL = 151643
SPECIAL_IDS = {t: FIRST_SPECIAL + i for i, t in enumerate(SPECIAL)}
NOT_SPECIAL = ("<tool_call>", "</tool_call>")
QWEN_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)

CHAT_TEMPLATE = (
    "{% set image_count = namespace(value=0) %}{% set video_count = namespace(value=0) %}"
    "{% for message in messages %}{% if loop.first and message['role'] != 'system' %}"
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n{% endif %}"
    "<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}<|im_end|>\n"
    "{% else %}{% for content in message['content'] %}"
    "{% if content['type'] == 'image' or 'image' in content or 'image_url' in content %}"
    "{% set image_count.value = image_count.value + 1 %}"
    "{% if add_vision_id %}Picture {{ image_count.value }}: {% endif %}"
    "<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif content['type'] == 'video' or 'video' in content %}"
    "{% set video_count.value = video_count.value + 1 %}"
    "{% if add_vision_id %}Video {{ video_count.value }}: {% endif %}"
    "<|vision_start|><|video_pad|><|vision_end|>"
    "{% elif 'text' in content %}{{ content['text'] }}{% endif %}{% endfor %}<|im_end|>\n"
    "{% endif %}{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def byte_level_alphabet() -> list[str]:
    """GPT-2's bytes-to-unicode table (the symbols a ByteLevel pre-tokenizer emits), in byte order."""
    printable = (
        list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    )
    table, extra = {}, 0
    for b in range(256):
        if b in printable:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return [table[b] for b in range(256)]


def vocab() -> dict[str, int]:
    """Regular vocabulary: 256 byte symbols, then fillers ``<|filler_N|>`` up to id FIRST_SPECIAL - 1."""
    v = {s: i for i, s in enumerate(byte_level_alphabet())}
    n = len(v)
    while n < FIRST_SPECIAL:
        v[f"<|filler_{n}|>"] = n
        n += 1
    return v


def added_tokens() -> list[dict[str, Any]]:
    return [
        {
            "id": SPECIAL_IDS[t],
            "content": t,
            "single_word": False,
            "lstrip": False,
            "rstrip": False,
            "normalized": False,
            "special": t not in NOT_SPECIAL,
        }
        for t in SPECIAL
    ]


def tokenizer_json() -> dict[str, Any]:
    """The ``tokenizer.json`` document (tokenizers' serialisation format)."""
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added_tokens(),
        "normalizer": {"type": "NFC"},
        "pre_tokenizer": {
            "type": "Sequence",
            "pretokenizers": [
                {"type": "Split", "pattern": {"Regex": QWEN_SPLIT}, "behavior": "Isolated", "invert": False},
                {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False},
            ],
        },
        "post_processor": None,
        "decoder": {
            "type": "ByteLevel",
            "add_prefix_space": False,
            "trim_offsets": False,
            "use_regex": False,
        },
        "model": {
            "type": "BPE",
            "dropout": None,
            "unk_token": None,
            "continuing_subword_prefix": None,
            "end_of_word_suffix": None,
            "fuse_unk": False,
            "byte_fallback": False,
            "ignore_merges": False,
            "vocab": vocab(),
            "merges": [],
        },
    }


def tokenizer_config() -> dict[str, Any]:
    return {
        "tokenizer_class": "Qwen2Tokenizer",
        "model_max_length": 131072,
        "errors": "replace",
        "bos_token": None,
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "unk_token": None,
        "clean_up_tokenization_spaces": False,
        "split_special_tokens": False,
        "add_prefix_space": False,
        "chat_template": CHAT_TEMPLATE,
        "added_tokens_decoder": {str(t["id"]): {k: v for k, v in t.items() if k != "id"} for t in added_tokens()},
    }
