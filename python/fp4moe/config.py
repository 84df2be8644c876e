"""Model configs: the presets, Hugging Face config.json, and dicts."""

from __future__ import annotations

import json
import os
from typing import Any, Union

from . import _native


def preset(name: str) -> dict:
    """A built-in model config: glm5, deepseek-v3, mixtral, each also with -small."""
    return json.loads(_native.fn("preset")(name))


def preset_names() -> list:
    return json.loads(_native.fn("preset_names")())


def checkpoint_format(config: Any) -> str:
    """The FP4 format the model's published checkpoint holds its experts in: "mxfp4"
    for gpt-oss, "nvfp4" (ModelOpt) for the others."""
    return str(_native.fn("checkpoint_format")(as_config_json(config)))


def config_from_hf(path: Union[str, os.PathLike]) -> dict:
    """The MoE config of a Hugging Face config.json (file or directory)."""
    p = os.fspath(path)
    if os.path.isdir(p):
        p = os.path.join(p, "config.json")
    return json.loads(_native.fn("config_from_hf")(p))


def as_config_json(config: Any) -> str:
    """A config given as a preset name, a dict (the keys of preset()) or a JSON string."""
    if isinstance(config, str):
        return config if config.lstrip().startswith("{") else _native.fn("preset")(config)
    if isinstance(config, dict):
        return json.dumps(config)
    raise ValueError(f"config: expected a preset name, a dict or a JSON string, got {type(config).__name__}")
