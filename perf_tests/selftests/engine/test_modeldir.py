"""Dummy-weight model directories: published shapes, Qwen's real special-token ids, loadable offline."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine_fixtures.errors import ConfigError
from engine_fixtures.model.modeldir import check_model_dir, main, write_model_dir
from engine_fixtures.model.shapes import SHAPES

REAL_IDS = {
    "<|endoftext|>": 151643,
    "<|im_start|>": 151644,
    "<|im_end|>": 151645,
    "<|vision_start|>": 151652,
    "<|vision_end|>": 151653,
    "<|image_pad|>": 151655,
    "<|video_pad|>": 151656,
}


@pytest.fixture(scope="module", params=sorted(SHAPES))
def model_dir(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_model_dir(tmp_path_factory.mktemp("m") / f"qwen-{request.param}", request.param)


def test_tokenizer_has_real_special_ids_and_encodes_the_vision_block(model_dir: Path) -> None:
    tokenizers = pytest.importorskip("tokenizers")
    tok = tokenizers.Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    for text, tid in REAL_IDS.items():
        assert tok.token_to_id(text) == tid
    ids = tok.encode("<|vision_start|><|image_pad|><|vision_end|>Describe ü").ids
    assert ids[:3] == [151652, 151655, 151653]
    assert tok.decode(ids[3:]) == "Describe ü"
    cfg = json.loads((model_dir / "config.json").read_text())
    assert tok.get_vocab_size() <= cfg.get("text_config", cfg)["vocab_size"]


def test_published_shapes() -> None:
    q25 = SHAPES["qwen2.5-vl-3b"].config
    assert (q25["hidden_size"], q25["num_hidden_layers"], q25["vision_config"]["depth"]) == (2048, 36, 32)
    q3 = SHAPES["qwen3-vl-4b"].config
    assert (q3["text_config"]["hidden_size"], q3["text_config"]["num_hidden_layers"]) == (2560, 36)
    assert q3["vision_config"]["patch_size"] == 16


def test_transformers_loads_config_tokenizer_and_processor(model_dir: Path) -> None:
    pytest.importorskip("torchvision", reason="the Qwen processors need torch+torchvision; CPU box lacks them")
    transformers = pytest.importorskip("transformers")
    proc = transformers.AutoProcessor.from_pretrained(model_dir)
    text = proc.apply_chat_template(
        [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "x"}]}],
        add_generation_prompt=True,
        tokenize=False,
    )
    assert "<|vision_start|><|image_pad|><|vision_end|>" in text


def test_bad_dirs_are_refused_with_the_fix(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="chat-template matcher"):
        write_model_dir(tmp_path / "internvl-copy")
    with pytest.raises(ConfigError, match=r"lacks config\.json"):
        check_model_dir(tmp_path)
    d = write_model_dir(tmp_path / "qwen", "tiny")
    cfg = json.loads((d / "config.json").read_text())
    (d / "config.json").write_text(json.dumps({**cfg, "image_token_id": 1}))
    with pytest.raises(ConfigError, match="image_token_id=1 but Qwen VL uses 151655"):
        check_model_dir(d)
    assert main([str(d), "--check"]) == 2
