"""Typed, frozen views of `params.yaml`: one model per DVC stage section.

`params.yaml` is the single source of every knob. A value that differs between profiles is written as a mapping
keyed by profile name (`{demo: ..., paper: ...}`); `load_section` picks the branch named by the top-level `profile`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Literal, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, Field, model_validator

PROFILES = frozenset({"demo", "paper"})
PARAMS_FILE = Path("params.yaml")


class Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ModelSpec(Frozen):
    """A model's identity (hub id or local path + pinned revision) and where/how it runs."""

    id: str
    revision: str | None = None
    device: str = "auto"
    dtype: Literal["auto", "float32", "float16", "bfloat16"] = "auto"


class EngineParams(Frozen):
    """How stages are cut into cached shards and where they run (the shard cache is Prefect's result store)."""

    shard_size: int = Field(64, ge=1, description="average captions per content-defined shard")
    dask_address: str | None = Field(None, description="a Dask scheduler to map shards over; None runs locally")
    torch_threads: int | None = Field(None, ge=1, description="CPU threads per process (None: torch's default). "
                                      "CPU float results depend on it, so runs compared bit for bit must share it")


class TinyModelsParams(Frozen):
    seed: int = 0
    vocab_size: int = Field(1000, ge=300)
    max_length: int = Field(128, ge=16)


class NounsParams(Frozen):
    tags: tuple[str, ...] = ("NN", "NNS")


class CandidatesParams(Frozen):
    model: ModelSpec
    top_k: int = Field(10, ge=1)
    batch_size: int = Field(64, ge=1)
    keep_tags: tuple[str, ...] = ("NN", "NNS", "NNP")


class SimilarityParams(Frozen):
    model: ModelSpec
    lower: float = 0.8
    upper: float = 0.91
    batch_size: int = Field(128, ge=1)

    @model_validator(mode="after")
    def _window(self) -> SimilarityParams:
        if not self.lower < self.upper:
            raise ValueError(f"similarity window needs lower < upper, got ({self.lower}, {self.upper}]")
        return self


class PerplexityParams(Frozen):
    model: ModelSpec
    batch_size: int = Field(16, ge=1)


P = TypeVar("P", bound=BaseModel)


def parse_overrides(pairs: Iterable[str]) -> dict[str, Any]:
    """`["similarity.upper=0.9"]` -> `{"similarity.upper": 0.9}` (values parsed as YAML scalars)."""
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ValueError(f"--param expects key=value, got {pair!r}")
        out[key.strip()] = yaml.safe_load(value)
    return out


def _apply(raw: dict[str, Any], overrides: Mapping[str, Any]) -> dict[str, Any]:
    for dotted, value in overrides.items():
        node = raw
        *parents, leaf = dotted.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return raw


def _pick_profile(node: Any, profile: str) -> Any:
    if isinstance(node, dict):
        if node and set(node) <= PROFILES:
            if profile not in node:
                raise ValueError(f"no value for profile {profile!r} in {node}")
            return _pick_profile(node[profile], profile)
        return {k: _pick_profile(v, profile) for k, v in node.items()}
    return node


def read_params(path: Path = PARAMS_FILE, overrides: Mapping[str, Any] = {}) -> dict[str, Any]:
    """The whole file with overrides applied (profile branches still unresolved)."""
    raw = yaml.safe_load(Path(path).read_text()) or {}
    return _apply(raw, overrides)


def load_section(model: type[P], section: str, raw: Mapping[str, Any]) -> P:
    """Validate one section of `raw`, resolved for its `profile`."""
    profile = raw.get("profile", "demo")
    if profile not in PROFILES:
        raise ValueError(f"profile must be one of {sorted(PROFILES)}, got {profile!r}")
    return model.model_validate(_pick_profile(raw.get(section, {}), profile))


# --- image stages (generate, filter) ---------------------------------------------------------------------------


class ClipSpec(ModelSpec):
    """An open_clip model: `id` is the architecture, `pretrained` a tag (`openai`) or a checkpoint path; `config` is
    an architecture JSON to register first (its file stem must equal `id`), for architectures open_clip lacks.
    `revision` is unused: a tag names fixed weights."""

    id: str = "ViT-L-14"
    pretrained: str = "openai"
    config: str | None = None


class AdaptiveParams(Frozen):
    """Over-generation in rounds of `round_samples`, stopping a pair once `min_accepted` samples pass the filter."""

    enabled: bool = False
    min_accepted: int = Field(1, ge=1)
    round_samples: int = Field(10, ge=1)


class GenerateParams(Frozen):
    """Paired Prompt-to-Prompt sampling. `guidance_scale` and `p2p_fraction` are U(lo, hi) ranges drawn per sample."""

    diffusion: ModelSpec = ModelSpec(id="stable-diffusion-v1-5/stable-diffusion-v1-5")
    vae: ModelSpec | None = Field(ModelSpec(id="stabilityai/sd-vae-ft-mse"),
                                  description="replaces the diffusion folder's vae/ (None keeps it); only its id and "
                                              "revision count: it runs on the diffusion spec's device and dtype")
    clip: ClipSpec = ClipSpec()
    size: int = Field(512, ge=8, description="image height and width in pixels")
    steps: int = Field(100, ge=1, description="Euler-ancestral steps")
    n_samples: int = Field(100, ge=1, description="samples (seeds) per caption pair")
    guidance_scale: tuple[float, float] = (7.5, 15.0)
    p2p_fraction: tuple[float, float] = (0.1, 0.9)
    p2p_mode: Literal["self", "word_swap"] = "self"
    seed: int = 0
    batch_samples: int = Field(4, ge=1, description="samples per UNet call (4 rows each); halved on CUDA OOM")
    top_k_images: int = Field(4, ge=0, description="samples per pair whose images are stored, by clip_dir")
    black_threshold: int = Field(4, ge=0, le=255, description="an image with every pixel <= this is black")
    clip_batch_size: int = Field(32, ge=1)
    adaptive: AdaptiveParams = AdaptiveParams()

    @model_validator(mode="after")
    def _ranges(self) -> GenerateParams:
        (g_lo, g_hi), (p_lo, p_hi) = self.guidance_scale, self.p2p_fraction
        if not g_lo <= g_hi:
            raise ValueError(f"guidance_scale needs lo <= hi, got {self.guidance_scale}")
        if not 0.0 <= p_lo <= p_hi <= 1.0:
            raise ValueError(f"p2p_fraction needs 0 <= lo <= hi <= 1, got {self.p2p_fraction}")
        return self


class FilterParams(Frozen):
    """CLIP thresholds, all inclusive (`score >= min`); among passing samples the highest clip_dir wins."""

    min_text_image_o: float = Field(0.2, description="sim(C_o, I_o)")
    min_text_image_c: float = Field(0.2, description="sim(C_c, I_c)")
    min_image_image: float = Field(0.7, description="sim(I_o, I_c)")
    min_clip_dir: float = Field(0.2, description="cos(E_I(I_c) - E_I(I_o), E_T(C_c) - E_T(C_o))")


# --- release (export, datasheet) --------------------------------------------------------------------------------


class ExportParams(Frozen):
    """The `datasets` folder (parquet shards under data/) and, when `repo_id` is set and HF_TOKEN given, its push."""

    shard_rows: int = Field(500, ge=1, description="rows per parquet shard at most")
    repo_id: str | None = Field(None, description="Hub dataset repo (owner/name) to push to; None never pushes")
    private: bool = True
    license: str = "cc-by-4.0"
    pretty_name: str = "COCO-Counterfactuals (regenerated)"


class DatasheetParams(Frozen):
    """What the generated datasheet summarises: the altered-subject table's length and the human-related nouns."""

    top_subjects: int = Field(20, ge=1, description="rows of the altered-subject table (paper Table 10)")
    human_words: tuple[str, ...] = (
        "man", "men", "woman", "women", "person", "people", "boy", "boys", "girl", "girls", "child", "children",
        "kid", "kids", "baby", "babies", "toddler", "teenager", "adult", "adults", "lady", "ladies", "guy", "guys",
        "gentleman", "gentlemen", "player", "players", "skier", "skiers", "surfer", "surfers", "skateboarder",
        "snowboarder", "rider", "riders", "cyclist", "biker", "batter", "pitcher", "catcher", "umpire", "athlete",
        "chef", "cook", "worker", "workers", "officer", "soldier", "soldiers", "doctor", "nurse", "farmer", "student",
        "students", "tourist", "tourists", "passenger", "passengers", "pedestrian", "pedestrians", "crowd", "family",
        "couple", "friends", "mother", "father", "son", "daughter", "wife", "husband", "bride", "groom",
    )
