"""Provenance: what an index manifest and a trained head record about their
making, and how a trained head's directory is written."""
from __future__ import annotations

import hashlib
import json
import os
import platform
import shlex
import sys
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch


def sha256_file(path: str | Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            h.update(block)
    return h.hexdigest()


def verified_sha256(weights: str | Path, expected: str | None = None) -> str:
    """sha256 of a weights directory's tensors (`model.safetensors`); a clear
    error when an index was built with other weights (`expected`)."""
    sha = sha256_file(Path(weights) / "model.safetensors")
    if expected is not None and sha != expected:
        raise ValueError(f"weights {weights} differ from the ones the index was built with")
    return sha


def recorded_weights(current: str | Path, earlier: str | Path, recorded_sha256: str | None) -> Path:
    """The weights an index recorded under a name whose weights were since
    replaced: `earlier` (where they moved) when the recorded sha256 is
    theirs and not `current`'s, else `current`. Only an index whose sha256
    is not the current weights' pays for hashing the earlier ones."""
    current, earlier = Path(current), Path(earlier)
    if recorded_sha256 is None or _sha256_or_none(current) == recorded_sha256:
        return current
    return earlier if _sha256_or_none(earlier) == recorded_sha256 else current


def _sha256_or_none(weights: Path) -> str | None:
    try:
        return verified_sha256(weights)
    except OSError:
        return None


def library_versions() -> dict[str, str]:
    versions = {"python": platform.python_version()}
    for name in ("propdex", "torch", "transformers", "peft", "faiss-cpu", "faiss-gpu", "numpy", "lmdb", "hnswlib"):
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return versions


def hardware() -> str:
    import torch

    if torch.cuda.is_available():
        return f"{torch.cuda.get_device_name(0)} (CUDA {torch.version.cuda})"
    return f"CPU {platform.machine()}, {os.cpu_count()} cores, {torch.get_num_threads()} torch threads"


def command_line() -> str:
    return "propdex " + " ".join(shlex.quote(a) for a in sys.argv[1:])


def data_record(path: str | Path) -> dict[str, Any]:
    return {"path": str(path), "sha256": sha256_file(path)}


def read_weights(path: str | Path, what: str, hint: str = "") -> tuple[dict[str, "torch.Tensor"], dict[str, Any]]:
    """(tensors, config) of a directory `save_weights` wrote; a clear error
    naming `what` is missing (and `hint`: how to make it) when it is not one."""
    from safetensors.torch import load_file

    config = read_config(path, what, hint)
    return load_file(str(Path(path) / "model.safetensors")), config


def read_config(path: str | Path, what: str, hint: str = "") -> dict[str, Any]:
    """The config of a directory `save_weights` wrote (what it was trained
    for, from what), without its tensors; `read_weights`' error when missing."""
    path = Path(path)
    if not (path / "config.json").is_file():
        raise FileNotFoundError(f"no {what} at {path} (config.json missing){'; ' + hint if hint else ''}")
    return json.loads((path / "config.json").read_text())


def save_weights(state: dict[str, "torch.Tensor"], path: str | Path, config: dict[str, Any]) -> None:
    """A trained head's directory: its tensors in `model.safetensors`, its
    config (with the provenance above) in `config.json`; written aside and
    renamed into place, so a crash never leaves half a directory."""
    import shutil

    from safetensors.torch import save_file

    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    tmp.mkdir(parents=True, exist_ok=True)
    save_file({k: v.contiguous() for k, v in state.items()}, str(tmp / "model.safetensors"))
    (tmp / "config.json").write_text(json.dumps(config, indent=1))
    if path.exists():
        shutil.rmtree(path)
    tmp.rename(path)
