"""The trainer's run machinery on tiny schedules (CPU): a killed and resumed run ends as an uninterrupted one, the
accuracy curve is recorded, a pool's batches do not depend on its workers, and the default schedule is the committed
run's."""

from __future__ import annotations

import itertools
import json
import shutil
from dataclasses import asdict, replace

import pytest
import torch

from tasks.core.errors import UserError
from tasks.core.specs import ModelSpec
from tasks.image.backends.sd1 import load_diffusion
from tasks.toyworld.accuracy import SCENE_KINDS
from tasks.toyworld.assemble import assemble
from tasks.toyworld.batches import Pool, diffusion_batch
from tasks.toyworld.checkpoints import Checkpoints
from tasks.toyworld.folders import staging
from tasks.toyworld.loop import Run, resolve
from tasks.toyworld.params import CHECKPOINT, WEIGHTS, Schedule
from tasks.toyworld.train import train

TINY = Schedule(vae_steps=2, diffusion_steps=4, clip_steps=2, lm_steps=3, batch=2, parse_steps=4)
BEFORE = Schedule.from_record(asdict(TINY) | Schedule.BEFORE)  # the recipe before issue 63: no parse, no grounding
RUN = Run(device="cpu", checkpoint_every=2, eval_scenes=2, eval_steps=2)
WEIGHT_FILES = ("diffusion.safetensors", "clip.safetensors", "mlm.safetensors", "clm.safetensors",
                "vocab/vocab.json", "vocab/merges.txt")


class Killed(Exception):
    """The test's kill: raised right after a checkpoint is written."""


def killed_at(monkeypatch, loop: str, step: int) -> None:
    save = Checkpoints.save

    def save_then_die(self, name: str, snapshot: dict) -> None:
        save(self, name, snapshot)
        if (name, snapshot["step"]) == (loop, step):
            raise Killed

    monkeypatch.setattr(Checkpoints, "save", save_then_die)


POOL = (replace(TINY, draw="pool"), replace(RUN, workers=1))


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    """(folder, record) of an uninterrupted run per (schedule, run), made on first use."""
    runs = {}

    def of(schedule: Schedule, run: Run):
        if (schedule, run) not in runs:
            out = tmp_path_factory.mktemp("uninterrupted")
            runs[schedule, run] = out, train(out, schedule, run)
        return runs[schedule, run]

    return of


@pytest.mark.parametrize("schedule, run, loop, step", [(TINY, RUN, "diffusion", 2), (TINY, RUN, "mlm", 2),
                                                       (*POOL, "diffusion", 2), (TINY, RUN, "parse", 2),
                                                       (BEFORE, RUN, "diffusion", 2)],
                         ids=["stream", "later", "pool", "parse", "before"])
def test_a_killed_run_resumed_ends_as_an_uninterrupted_one(uninterrupted, tmp_path, monkeypatch, schedule, run, loop,
                                                            step):
    """Killed right after a checkpoint (in the diffusion loop; in a later loop, every earlier one finished; with a
    pool's worker drawing ahead; in the text encoder's parse loop; with the recipe before issue 63), then resumed:
    the same weights, losses and accuracy curve."""
    with monkeypatch.context() as patch:
        killed_at(patch, loop, step)
        with pytest.raises(Killed):
            train(tmp_path, schedule, run)
    assert (staging(tmp_path) / CHECKPOINT).exists() and not any(tmp_path.iterdir())  # OUTPUT untouched
    record = train(tmp_path, schedule, replace(run, resume=True))
    out, expected = uninterrupted(schedule, run)
    for name in WEIGHT_FILES:
        assert (tmp_path / name).read_bytes() == (out / name).read_bytes(), name
    for key in ("losses_per_50_steps", "scaling_factor", "accuracy", "parse_accuracy"):
        assert record.get(key) == expected.get(key), key
    assert not (tmp_path / CHECKPOINT).exists() and not staging(tmp_path).exists()


def test_a_checkpoint_of_another_schedule_is_refused(tmp_path, monkeypatch):
    with monkeypatch.context() as patch:
        killed_at(patch, "vae", 2)
        with pytest.raises(Killed):
            train(tmp_path, TINY, RUN)
    with pytest.raises(UserError, match="another run"):
        train(tmp_path, replace(TINY, lr=2e-3), replace(RUN, resume=True))


def test_the_accuracy_curve_is_written_per_checkpoint_and_scene_kind(uninterrupted):
    out, record = uninterrupted(TINY, RUN)
    written = json.loads((out / "train.json").read_text())["accuracy"]
    assert written == record["accuracy"]
    assert {k: written[k] for k in ("scenes", "steps", "guidance")} == {"scenes": 2, "steps": 2, "guidance": 2.0}
    assert [point["step"] for point in written["curve"]] == [2, 4]
    for point in written["curve"]:
        assert set(point) == {"step", "all", *SCENE_KINDS}
        assert all(v is None or 0 <= v <= 1 for k, v in point.items() if k != "step")


def test_a_pool_draws_the_same_batches_for_any_number_of_workers():
    def first(workers: int, start: int, n: int):
        loader = torch.utils.data.DataLoader(Pool(diffusion_batch, 2, "0:diffusion", start), batch_size=None,
                                             num_workers=workers)
        return list(itertools.islice(loader, n))

    alone, parallel = first(0, 0, 4), first(2, 1, 3)
    for (images, ids), (images_w, ids_w) in zip(alone[1:], parallel, strict=True):
        assert torch.equal(images, images_w) and torch.equal(ids, ids_w)


def test_only_the_diffusion_model_trains_on_the_committed_vae_and_assembles_as_recorded(tmp_path):
    """The other models are the committed ones; the UNet assembles with the attention heads it trained with."""
    weights = tmp_path / "weights"
    record = train(weights, replace(TINY, attention_heads=2, min_snr_gamma=5.0, draw="pool"),
                   replace(RUN, only=("diffusion",), checkpoint_every=0, eval_scenes=0))
    committed = json.loads((WEIGHTS / "train.json").read_text())
    assert set(record["losses_per_50_steps"]) == {"parse", "diffusion", "grounding"}
    assert record["scaling_factor"] == committed["scaling_factor"]
    assert record["reused"] == {"from": str(WEIGHTS), "models": ["vae", "clip", "lms"]}
    for name in WEIGHT_FILES[1:]:
        assert (weights / name).read_bytes() == (WEIGHTS / name).read_bytes(), name
    assemble(weights, tmp_path / "assembled")
    unet = load_diffusion(ModelSpec(id=str(tmp_path / "assembled" / "diffusion"), device="cpu"), None).unet
    assert unet.config.attention_head_dim == 2


@pytest.mark.parametrize("steps", ["vae_steps", "parse_steps", "diffusion_steps", "clip_steps", "lm_steps"])
def test_a_loop_of_twenty_steps_is_one_line_before_any_training(tmp_path, steps):
    """5% of 20 is a one-step warm-up, which torch's one-cycle schedule divides by zero on: refused up front."""
    with pytest.raises(UserError, match=f"--{steps.replace('_', '-')} 20: .* use 19 or 21"):
        train(tmp_path / "out", replace(TINY, **{steps: 20}), RUN)
    assert not any(tmp_path.iterdir())


def test_auto_is_cuda_when_torch_sees_a_gpu_else_the_cpu():
    assert resolve("auto") == torch.device("cuda" if torch.cuda.is_available() else "cpu")
    assert resolve("cpu") == torch.device("cpu")
    with pytest.raises(UserError):
        resolve("gpu")


def test_the_default_schedule_is_the_committed_runs():
    committed = json.loads((WEIGHTS / "train.json").read_text())["schedule"]
    assert {k: v for k, v in asdict(Schedule()).items() if k in committed} == committed
    assert Schedule.from_record(committed) == Schedule()


@pytest.mark.parametrize("change, message", [
    ({"attention_heads": 3}, r"--attention-heads 3: .* use one of \[1, 2, 4, 8, 16, 32\]"),
    ({"attention_heads": 64}, "--attention-heads 64"), ({"lr": 0.0}, "lr 0.0"), ({"ema_decay": 1.0}, "ema decay 1.0"),
    ({"batch": 100_000_000}, r"--batch 100000000 needs about 1,303,853 GiB on cpu, which has \d+ GiB: use --batch \d+ or")])
def test_a_schedule_that_cannot_train_is_one_line_before_any_training(tmp_path, change, message):
    """Heads that do not split a UNet level's channels (64 was a ZeroDivisionError deep in diffusers; 3 trained
    narrower layers than asked), a learning rate of 0 and an EMA that never moves would train nothing they say; a
    batch beyond the machine's memory was an out-of-memory kill after minutes of drawing scenes."""
    with pytest.raises(UserError, match=message):
        train(tmp_path / "out", replace(TINY, **change), RUN)
    assert not any(tmp_path.iterdir())


def _unreadable(folder):
    (folder / "train.json").write_bytes(b"\xff\xfe not json")


def _no_schedule(folder):
    (folder / "train.json").write_text("[1]")


def _another_trainer(folder):
    record = json.loads((folder / "train.json").read_text())
    (folder / "train.json").write_text(json.dumps(record | {"schedule": record["schedule"] | {"mixup": 0.2}}))


def _no_lms(folder):
    (folder / "mlm.safetensors").unlink()


@pytest.mark.parametrize("broken, message", [(_unreadable, "no readable training record"),
                                             (_no_schedule, "no training record"),
                                             (_another_trainer, r"another trainer \(fields \['mixup'\]\)"),
                                             (_no_lms, "lacks mlm.safetensors")])
def test_a_reused_folder_that_cannot_give_its_weights_is_one_line_before_any_training(tmp_path, broken, message):
    """The record and every file `--only` copies from `--reuse` are checked first (a missing file was found after
    the training, a torn record was a traceback)."""
    reuse = tmp_path / "reuse"
    shutil.copytree(WEIGHTS, reuse)
    broken(reuse)
    with pytest.raises(UserError, match=message):
        train(tmp_path / "out", TINY, replace(RUN, only=("clip",), reuse=reuse))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["reuse"]
