"""Write a model directory that SGLang serves with ``--load-format dummy`` and no download.

``python -m engine_fixtures.model.modeldir --shape {tiny,qwen2.5-vl-3b,qwen3-vl-4b} OUT_DIR`` writes config.json
(published shapes, see ``model.shapes``), preprocessor_config.json (+ video for Qwen3-VL),
generation_config.json, tokenizer.json / vocab.json / merges.txt / tokenizer_config.json with Qwen's real
special-token ids, and chat_template.json. SGLang's conversation matchers look at the path, so names such as
``points`` or ``internvl`` in OUT_DIR are refused. ``check_model_dir`` validates a directory (ours or a real
one) without SGLang.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

from engine_fixtures.errors import ConfigError
from engine_fixtures.model import tokenizer as qt
from engine_fixtures.model.shapes import IDS, SHAPES

# SGLang's template matchers regex the model path (srt/parser/conversation.py): these force a wrong template.
FORBIDDEN_PATH_PARTS = re.compile(r"\bpoints\b|internvl|moss.*vl|minicpm-(v|o)|phi-4-multimodal|llava", re.I)
REQUIRED_FILES = ("config.json", "preprocessor_config.json", "tokenizer.json", "tokenizer_config.json")


def _dump(path: Path, data: Any) -> None:
    path.write_text(json.dumps(data, indent=1, ensure_ascii=False))


def write_model_dir(out: Path, shape: str = "tiny") -> Path:
    """Write the directory for ``shape`` into ``out`` (created; existing files are overwritten)."""
    if shape not in SHAPES:
        raise ConfigError(f"unknown model shape {shape!r}; use one of {', '.join(SHAPES)}")
    if FORBIDDEN_PATH_PARTS.search(str(out)):
        raise ConfigError(
            f"model dir {out} contains a name SGLang's chat-template matcher keys on "
            f"({FORBIDDEN_PATH_PARTS.search(str(out)).group(0)!r}); choose another directory name"
        )
    s = SHAPES[shape]
    out.mkdir(parents=True, exist_ok=True)
    _dump(out / "config.json", s.config)
    _dump(out / "preprocessor_config.json", s.preprocessor)
    if s.video_preprocessor is not None:
        _dump(out / "video_preprocessor_config.json", s.video_preprocessor)
    _dump(out / "generation_config.json", s.generation)
    tj = qt.tokenizer_json()
    (out / "tokenizer.json").write_text(json.dumps(tj, ensure_ascii=False, separators=(",", ":")))
    _dump(out / "vocab.json", tj["model"]["vocab"])
    (out / "merges.txt").write_text("#version: 0.2\n")
    _dump(out / "tokenizer_config.json", qt.tokenizer_config())
    _dump(out / "chat_template.json", {"chat_template": qt.CHAT_TEMPLATE})
    _dump(out / "perf_model_shape.json", {"shape": shape, "load_format": "dummy", **s.notes})
    return out


def check_model_dir(path: Path) -> dict[str, Any]:
    """Validate structure and token ids; returns the parsed config. ConfigError names what is wrong."""
    if not path.is_dir():
        raise ConfigError(
            f"model path {path} does not exist or is not a directory; generate a dummy-weight one "
            f"with `python -m engine_fixtures.model.modeldir --shape tiny {path}` or pass --perf-model DIR"
        )
    missing = [f for f in REQUIRED_FILES if not (path / f).is_file()]
    if missing:
        raise ConfigError(
            f"model dir {path} lacks {', '.join(missing)}; "
            "regenerate it with `python -m engine_fixtures.model.modeldir`"
        )
    cfg = json.loads((path / "config.json").read_text())
    for key, want in (
        ("image_token_id", IDS["image_pad"]),
        ("video_token_id", IDS["video_pad"]),
        ("vision_start_token_id", IDS["vision_start"]),
        ("vision_end_token_id", IDS["vision_end"]),
    ):
        if cfg.get(key) != want:
            raise ConfigError(f"{path}/config.json: {key}={cfg.get(key)} but Qwen VL uses {want}")
    added = {t["content"]: t["id"] for t in json.loads((path / "tokenizer.json").read_text())["added_tokens"]}
    for tok, tid in qt.SPECIAL_IDS.items():
        if tok in ("<tool_call>", "</tool_call>") and tok not in added:
            continue
        if added.get(tok) != tid:
            raise ConfigError(f"{path}/tokenizer.json: {tok} has id {added.get(tok)}, expected {tid}")
    text = cfg.get("text_config", cfg)
    if max(added.values()) >= text["vocab_size"]:
        raise ConfigError(f"{path}: token id {max(added.values())} does not fit vocab_size {text['vocab_size']}")
    tcfg = json.loads((path / "tokenizer_config.json").read_text())
    if not (
        tcfg.get("chat_template") or (path / "chat_template.json").is_file() or (path / "chat_template.jinja").is_file()
    ):
        raise ConfigError(f"{path} has no chat template; SGLang's VLM warmup would fail and the server exit")
    return cfg


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m engine_fixtures.model.modeldir", description=__doc__.splitlines()[0])
    p.add_argument("out", type=Path, help="directory to write")
    p.add_argument("--shape", choices=sorted(SHAPES), default="tiny")
    p.add_argument("--check", action="store_true", help="only validate OUT (any model dir)")
    a = p.parse_args(argv)
    try:
        if not a.check:
            write_model_dir(a.out, a.shape)
        cfg = check_model_dir(a.out)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    size = sum(f.stat().st_size for f in a.out.iterdir() if f.is_file()) / 2**20
    print(f"{a.out}: {cfg['architectures'][0]} ok ({size:.1f} MiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
