"""Published shapes of the Qwen VL models the suite serves with dummy weights (``--load-format dummy``).

``SHAPES`` maps a name to the files' JSON content (config, preprocessor, generation, video preprocessor).
The 3B/4B entries copy the published Hugging Face configs' sizes and token ids; ``tiny`` is a Qwen2.5-VL
layout shrunk for quick runs (text 1024 x 8 layers, vision depth 4), keeping head dims and ids real.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

IDS = {
    "bos": 151643,
    "eos": 151645,
    "vision_start": 151652,
    "vision_end": 151653,
    "vision_pad": 151654,
    "image_pad": 151655,
    "video_pad": 151656,
}
VOCAB_SIZE = 151936  # embedding rows (the tokenizer itself has 151665 entries, as in the real repos)


@dataclass(frozen=True)
class ModelShape:
    name: str
    config: dict[str, Any]
    preprocessor: dict[str, Any]
    generation: dict[str, Any]
    video_preprocessor: dict[str, Any] | None = None
    notes: dict[str, str] = field(default_factory=dict)


def _qwen25_vl(
    h: int,
    inter: int,
    layers: int,
    heads: int,
    kv: int,
    vh: int,
    vinter: int,
    vdepth: int,
    vheads: int,
    fullatt: list[int],
) -> dict[str, Any]:
    return {
        "architectures": ["Qwen2_5_VLForConditionalGeneration"],
        "model_type": "qwen2_5_vl",
        "hidden_size": h,
        "intermediate_size": inter,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "num_key_value_heads": kv,
        "hidden_act": "silu",
        "max_position_embeddings": 128000,
        "rms_norm_eps": 1e-6,
        "rope_theta": 1000000.0,
        "vocab_size": VOCAB_SIZE,
        "tie_word_embeddings": True,
        "attention_dropout": 0.0,
        "initializer_range": 0.02,
        "max_window_layers": 70,
        "sliding_window": 32768,
        "use_sliding_window": False,
        "use_cache": True,
        "rope_scaling": {"type": "mrope", "rope_type": "default", "mrope_section": [16, 24, 24]},
        "bos_token_id": IDS["bos"],
        "eos_token_id": IDS["eos"],
        "torch_dtype": "bfloat16",
        "transformers_version": "4.49.0",
        "vision_start_token_id": IDS["vision_start"],
        "vision_end_token_id": IDS["vision_end"],
        "vision_token_id": IDS["vision_pad"],
        "image_token_id": IDS["image_pad"],
        "video_token_id": IDS["video_pad"],
        "vision_config": {
            "model_type": "qwen2_5_vl",
            "depth": vdepth,
            "hidden_act": "silu",
            "hidden_size": vh,
            "intermediate_size": vinter,
            "num_heads": vheads,
            "in_chans": 3,
            "in_channels": 3,
            "out_hidden_size": h,
            "patch_size": 14,
            "spatial_merge_size": 2,
            "spatial_patch_size": 14,
            "temporal_patch_size": 2,
            "window_size": 112,
            "fullatt_block_indexes": fullatt,
            "tokens_per_second": 2,
            "initializer_range": 0.02,
        },
    }


_QWEN25_PRE = {
    "min_pixels": 3136,
    "max_pixels": 12845056,
    "patch_size": 14,
    "temporal_patch_size": 2,
    "merge_size": 2,
    "image_mean": [0.48145466, 0.4578275, 0.40821073],
    "image_std": [0.26862954, 0.26130258, 0.27577711],
    "do_resize": True,
    "do_rescale": True,
    "do_normalize": True,
    "do_convert_rgb": True,
    "rescale_factor": 0.00392156862745098,
    "image_processor_type": "Qwen2VLImageProcessor",
    "processor_class": "Qwen2_5_VLProcessor",
}
_QWEN25_GEN = {
    "bos_token_id": IDS["bos"],
    "eos_token_id": [IDS["eos"], IDS["bos"]],
    "pad_token_id": IDS["bos"],
    "do_sample": True,
    "temperature": 1e-06,
    "repetition_penalty": 1.05,
    "top_k": 1,
    "top_p": 0.001,
    "transformers_version": "4.49.0",
}

_QWEN3_VL_4B = {
    "architectures": ["Qwen3VLForConditionalGeneration"],
    "model_type": "qwen3_vl",
    "image_token_id": IDS["image_pad"],
    "video_token_id": IDS["video_pad"],
    "vision_start_token_id": IDS["vision_start"],
    "vision_end_token_id": IDS["vision_end"],
    "tie_word_embeddings": True,
    "transformers_version": "4.57.0.dev0",
    "text_config": {
        "model_type": "qwen3_vl_text",
        "hidden_size": 2560,
        "intermediate_size": 9728,
        "num_hidden_layers": 36,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "hidden_act": "silu",
        "max_position_embeddings": 262144,
        "rms_norm_eps": 1e-6,
        "rope_theta": 5000000,
        "rope_scaling": {"mrope_interleaved": True, "mrope_section": [24, 20, 20], "rope_type": "default"},
        "vocab_size": VOCAB_SIZE,
        "tie_word_embeddings": True,
        "attention_bias": False,
        "attention_dropout": 0.0,
        "initializer_range": 0.02,
        "use_cache": True,
        "bos_token_id": IDS["bos"],
        "eos_token_id": IDS["eos"],
        "dtype": "bfloat16",
    },
    "vision_config": {
        "model_type": "qwen3_vl",
        "depth": 24,
        "hidden_size": 1024,
        "intermediate_size": 4096,
        "num_heads": 16,
        "out_hidden_size": 2560,
        "patch_size": 16,
        "spatial_merge_size": 2,
        "temporal_patch_size": 2,
        "num_position_embeddings": 2304,
        "deepstack_visual_indexes": [5, 11, 17],
        "hidden_act": "gelu_pytorch_tanh",
        "in_channels": 3,
        "initializer_range": 0.02,
    },
}
# Shared by Qwen3-VL's preprocessor_config.json and video_preprocessor_config.json.
_QWEN3_PIXELS = {
    "patch_size": 16,
    "temporal_patch_size": 2,
    "merge_size": 2,
    "image_mean": [0.5, 0.5, 0.5],
    "image_std": [0.5, 0.5, 0.5],
    "do_resize": True,
    "do_rescale": True,
    "do_normalize": True,
    "do_convert_rgb": True,
    "rescale_factor": 0.00392156862745098,
    "processor_class": "Qwen3VLProcessor",
}
_QWEN3_PRE = {
    **_QWEN3_PIXELS,
    "size": {"longest_edge": 16777216, "shortest_edge": 65536},
    "image_processor_type": "Qwen2VLImageProcessorFast",
}
_QWEN3_VIDEO = {
    **_QWEN3_PIXELS,
    "size": {"longest_edge": 25165824, "shortest_edge": 4096},
    "do_sample_frames": True,
    "fps": 2,
    "video_processor_type": "Qwen3VLVideoProcessor",
}
_QWEN3_GEN = {
    "bos_token_id": IDS["bos"],
    "eos_token_id": [IDS["eos"], IDS["bos"]],
    "pad_token_id": IDS["bos"],
    "do_sample": True,
    "temperature": 0.7,
    "top_k": 20,
    "top_p": 0.8,
    "transformers_version": "4.56.0",
}

SHAPES: dict[str, ModelShape] = {
    "qwen2.5-vl-3b": ModelShape(
        "qwen2.5-vl-3b",
        _qwen25_vl(2048, 11008, 36, 16, 2, 1280, 3420, 32, 16, [7, 15, 23, 31]),
        _QWEN25_PRE,
        _QWEN25_GEN,
        notes={"source": "Qwen/Qwen2.5-VL-3B-Instruct config.json (published sizes)"},
    ),
    "qwen3-vl-4b": ModelShape(
        "qwen3-vl-4b",
        _QWEN3_VL_4B,
        _QWEN3_PRE,
        _QWEN3_GEN,
        _QWEN3_VIDEO,
        notes={"source": "Qwen/Qwen3-VL-4B-Instruct config.json (published sizes)"},
    ),
    "tiny": ModelShape(
        "tiny",
        _qwen25_vl(1024, 2816, 8, 8, 2, 640, 1712, 4, 8, [1, 3]),
        _QWEN25_PRE,
        _QWEN25_GEN,
        notes={"source": "Qwen2.5-VL layout shrunk: text 1024x8 layers, vision 640x4"},
    ),
}
