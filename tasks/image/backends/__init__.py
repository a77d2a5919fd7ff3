"""Image backends: the diffusion model family under the paired P2P sampler (`sampling.render`).

A backend is a class declared, with what it asks of a run that is known without loading it (UNet rows per sample,
its folder's components, its plan rate), under its `generate.backend` name in `params.BACKEND_NEEDS`, as a
`"module:Class"` entry resolved only when chosen: no backend's code is reached from another's, so a sample's key
(`render.sample_unit`) holds the chosen backend's code alone. Its instances are loaded models: P2P processors
installed in the denoiser, which takes a sample's rows as adjacent (o, c) pairs (`p2p`'s batch contract).
"""

from __future__ import annotations

import pkgutil
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, cast

if TYPE_CHECKING:
    import torch
    from diffusers import SchedulerMixin

    from tasks.core.specs import ModelSpec
    from tasks.image.params import GenerateParams


class Diffusion(Protocol):
    """A loaded backend on one device/dtype; `lock` serialises the renders of every thread sharing it (one batch at a
    time on the device, as a compiled denoiser's CUDA graphs require)."""

    @property
    def denoiser(self) -> torch.nn.Module: ...  # called once per denoising step (what a UNet-time hook wraps)
    @property
    def scheduler(self) -> SchedulerMixin: ...  # its kind and config make the render's scheduler, `steps` reads it
    @property
    def compile_mode(self) -> str | None: ...
    @property
    def device(self) -> torch.device: ...
    @property
    def dtype(self) -> torch.dtype: ...
    @property
    def latent_channels(self) -> int: ...
    @property
    def latent_factor(self) -> int: ...  # image side / latent side
    @property
    def lock(self) -> threading.Lock: ...

    @classmethod
    def load(cls, params: GenerateParams) -> Diffusion:
        """The models `params` name (`generate.diffusion`, `vae`, placement, compile mode), loaded once per process."""

    @property
    def steps(self) -> Callable[[SchedulerMixin], list[Any]]:
        """The render's updates of a scheduler after `set_timesteps`, in order (`sampling.AncestralStep` or
        `FlowStep`): `scale_input`, `noisy` (takes noise drawn for it), called as `step(prediction, latents, noise)`
        (a static method of the backend)."""

    @classmethod
    def token_counts(cls, spec: ModelSpec, caption: str,
                     counterfactual: str) -> tuple[tuple[int, int], tuple[bool, bool]]:
        """Untruncated token counts of C_o and C_c and whether each exceeds the text encoder's limit (no weights)."""

    def encode(self, caption: str, counterfactual: str) -> Any:
        """C_o, C_c and the unconditional prompt encoded: what `condition` reads."""

    def condition(self, prompts: Any, n: int, size: int) -> Any:
        """The denoiser's conditioning of `n` samples' rows at `size` pixels, built once per render."""

    def denoise(self, rows: torch.Tensor, t: torch.Tensor, conditioning: Any,
                shared: torch.Tensor | None) -> torch.Tensor:
        """The prediction (ε or velocity, as the scheduler's kind steps it) of every row at timestep `t`, P2P sharing
        per row pair as `shared` (`p2p.schedule`) directs."""

    def decode(self, latents: torch.Tensor) -> torch.Tensor:
        """Images in [-1, 1] (N, 3, H, W) of denoised latents."""


def chosen(params: GenerateParams) -> type[Diffusion]:
    """The backend `generate.backend` names, imported now."""
    return pkgutil.resolve_name(params.needs.entry)


def code_files(params: GenerateParams) -> set[Path]:
    """The project source files the chosen backend's class reaches (`code.Walk`, as its samples' keys hold them),
    read, not imported."""
    from tasks.core.code import Walk
    from tasks.core.source import source_file

    walk = Walk()
    walk.definition(*params.needs.entry.split(":"))
    return {cast(Path, source_file(name)) for name in walk.modules}  # project modules: each has a file
