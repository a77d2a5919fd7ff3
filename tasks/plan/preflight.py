"""Pre-flight checks: every model the profile runs is loadable offline, which devices run it, and free disk.

Nothing here downloads: a hub model is looked up in the local Hugging Face cache at its pinned revision, an open_clip
tag in the cache of the hub repository open_clip would fetch it from. A missing one comes with the command that
fetches it.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from tasks.core.fingerprints import hf_cache_dir, is_hub_id
from tasks.core.params import Section
from tasks.core.specs import ClipSpec, ItmSpec, ModelSpec, model_specs
from tasks.stages import Params

PROCESSOR_CONFIGS = ("processor_config.json", "preprocessor_config.json")  # what AutoProcessor reads first


@dataclass(frozen=True)
class ModelCheck:
    key: str                      # its params key, e.g. generate.diffusion
    model: str                    # id@revision, a path, or an open_clip architecture:tag
    present: bool
    fetch: str | None             # the command that puts it where it is looked up (None: present, or a local path)
    device: str
    dtype: str


def in_hub_cache(repo: str, revision: str | None) -> bool:
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    try:
        snapshot_download(repo, revision=revision, cache_dir=hf_cache_dir(), local_files_only=True)
    except LocalEntryNotFoundError:  # also a partial download
        return False
    return True


def hub_check(spec: ModelSpec) -> tuple[str, bool, str | None]:
    """(what it names, present, fetch command) of a model given by a local path or a hub id."""
    if Path(spec.local()).exists() or not is_hub_id(spec.id):
        return spec.id, Path(spec.local()).exists(), None
    name = f"{spec.id}@{spec.revision}" if spec.revision else f"{spec.id} (revision not pinned)"
    present = in_hub_cache(spec.id, spec.revision)
    return name, present, None if present else " ".join(
        ["hf download", spec.id, *(["--revision", spec.revision] if spec.revision else [])])


def clip_check(spec: ClipSpec) -> tuple[str, bool, str | None]:
    """(what it names, present, fetch command) of an open_clip model: a weights file, or a tag open_clip fetches
    from a hub repository (or a URL)."""
    weights = Path(spec.local(spec.pretrained))
    if weights.exists() or spec.config is not None:
        return f"{spec.id}:{spec.pretrained}", weights.exists(), None
    import open_clip

    entry = open_clip.get_pretrained_cfg(spec.id, spec.pretrained) or {}
    if repo := entry.get("hf_hub", "").strip("/"):
        present = in_hub_cache(repo, None)
        return f"{spec.id}:{spec.pretrained}", present, None if present else f"hf download {repo}"
    return f"{spec.id}:{spec.pretrained}", False, entry.get("url") or f"no open_clip tag {spec.pretrained}"


def missing(section) -> list[str]:
    """`name (fetch command)` of each hub model of a params section that is not in this machine's cache."""
    checks = (clip_check(spec) if isinstance(spec, ClipSpec) else hub_check(spec) for _, spec in model_specs(section))
    return [f"{name} ({fetch})" for name, present, fetch in checks if not present and fetch]


TOKENIZER_FILES = ("tokenizer.json", "vocab.json", "vocab.txt", "spiece.model", "sentencepiece.bpe.model",
                   "tokenizer.model")  # one of them holds a transformers model folder's tokenizer


def reads_processor(spec: ModelSpec, config: dict) -> bool:
    """Whether the model's loader starts with its `AutoProcessor`: an image-text model (an `ItmSpec`, or a config
    with a `vision_config`, as the judge's VLM has)."""
    return isinstance(spec, ItmSpec) or "vision_config" in config


def _lacking_component(spec: ModelSpec, folder: Path, components: Mapping[str, tuple[str, ...]]) -> str | None:
    """What a diffusers folder (a `unet/` or `transformer/` in it) lacks of the `components` its loader reads besides
    the VAE (`generate.vae` may replace vae/; a missing one is the loader's line); None when nothing."""
    for component, files in components.items():
        if not any((folder / component / name).is_file() for name in files):
            return f"model folder {spec.id} has no {component}/ ({' or '.join(files)}): its loader reads " \
                   f"{', '.join(f'{c}/' for c in components)} and vae/"
    return None


def _lacking(spec: ModelSpec, folder: Path, section: Section) -> str | None:
    """What a local model folder of `section` lacks that its loader reads: a diffusers folder the section's
    `components` (asked for only then, so a command without one imports no layout); one with a config.json a config
    that parses, a tokenizer (a transformers model: its config has a `model_type`; a diffusers VAE's has none), a
    processor config (image-text models); a folder with neither, that it holds no model; None when nothing (or no
    such folder: a hub id)."""
    if (folder / "unet").is_dir() or (folder / "transformer").is_dir():
        return _lacking_component(spec, folder, section.components())
    if not (folder / "config.json").is_file():
        return f"model folder {spec.id} has no config.json (nor unet/): no model is saved there" \
            if folder.is_dir() else None
    try:
        config = json.loads((folder / "config.json").read_text())
    except ValueError as err:
        return f"model folder {spec.id}: its config.json is no JSON ({err})"
    if "model_type" in config and not any((folder / name).is_file() for name in TOKENIZER_FILES):
        return f"model folder {spec.id} has no tokenizer ({' or '.join(TOKENIZER_FILES)}): save the model's " \
               "tokenizer there (`tokenizer.save_pretrained`)"
    if reads_processor(spec, config) and not any((folder / name).is_file() for name in PROCESSOR_CONFIGS):
        return f"model folder {spec.id} has no processor config ({' or '.join(PROCESSOR_CONFIGS)}): save the " \
               "model's processor there (`processor.save_pretrained`)"
    return None


def incomplete(section: Section) -> list[str]:
    """A line for each local model folder of a params section (transformers, or a diffusers folder: the section's
    `components`) that lacks what its loader reads (a broken weights file is the loader's one line:
    `loading.load_once`)."""
    folders = ((spec, Path(spec.local())) for _, spec in model_specs(section) if not isinstance(spec, ClipSpec))
    return [line for spec, folder in folders if (line := _lacking(spec, folder, section)) is not None]


def running_sections(params: Params, among: tuple[str, ...] | None = None) -> list:
    """Each params section (of `among`; None: every one) with a model a run loads (`Params.running_models`), once,
    in their order."""
    names = dict.fromkeys(key.split(".")[0] for key, _ in params.running_models())
    return [getattr(params, name) for name in names if among is None or name in among]


def placement(spec: ModelSpec) -> tuple[str, str]:
    """(device, dtype) the spec runs on in this process."""
    from tasks.core.loading import resolve_device, resolve_dtype

    device = resolve_device(spec)
    return str(device), str(resolve_dtype(spec, device)).removeprefix("torch.")


def check_models(params: Params) -> list[ModelCheck]:
    """Each model's presence and placement; the VAE runs on the diffusion model's device and dtype."""
    placed = {"generate.vae": params.generate.diffusion}
    return [ModelCheck(key, *(clip_check(spec) if isinstance(spec, ClipSpec) else hub_check(spec)),
                       *placement(placed.get(key, spec))) for key, spec in params.running_models()]


def devices() -> list[dict]:
    """The GPUs this process sees (CUDA_VISIBLE_DEVICES applied), else the CPU with the cores it may use."""
    import torch

    if torch.cuda.is_available():
        return [{"device": f"cuda:{i}", "name": (p := torch.cuda.get_device_properties(i)).name,
                 "memory_gib": round(p.total_memory / 2**30, 1), "bfloat16": torch.cuda.is_bf16_supported()}
                for i in range(torch.cuda.device_count())]
    return [{"device": "cpu", "name": f"{len(os.sched_getaffinity(0))} cores", "memory_gib": None,
             "bfloat16": False}]


def free_bytes(path: Path) -> int:
    """Free space on the filesystem that holds `path` (its nearest existing folder)."""
    return shutil.disk_usage(nearest_existing(path)).free


def nearest_existing(path: Path) -> Path:
    path = Path(path).absolute()
    while not path.exists():
        path = path.parent
    return path


def disk_short(needs: dict[Path, float]) -> list[str]:
    """For each filesystem the `needs` (path -> bytes to be written under it) fall on, a line when their sum exceeds
    its free space."""
    by_device: dict[int, tuple[int, list[Path], float]] = {}
    for path, need in needs.items():
        existing = nearest_existing(path)
        device = existing.stat().st_dev
        free, paths, total = by_device.get(device, (shutil.disk_usage(existing).free, [], 0.0))
        by_device[device] = (free, [*paths, Path(path)], total + need)
    return [f"{', '.join(map(str, paths))} need {total / 1e9:.3g} GB, {free / 1e9:.3g} GB free"
            for free, paths, total in by_device.values() if total > free]
