"""The trainer's folders and checkpoints (issue 64): a checkpoint is read as data, never run; an unreadable one is one
line; OUTPUT is built in a staging folder and swapped in whole; a folder holding files no run wrote, the committed
weights, a device torch does not see and a non-finite number are refused before any work, leaving nothing behind."""

from __future__ import annotations

import os
import pickle
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from tasks.core.errors import UserError
from tasks.core.writing import OutputError
from tasks.toyworld import folders
from tasks.toyworld import train as training
from tasks.toyworld.checkpoints import Checkpoints
from tasks.toyworld.loop import Run
from tasks.toyworld.params import CHECKPOINT, WEIGHTS, Schedule
from tasks.toyworld.train import train
from tests.flows.test_cli import assert_one_error, cfgen

TINY = Schedule(diffusion_steps=4, batch=2, parse_steps=4)
ONLY = Run(device="cpu", checkpoint_every=0, eval_scenes=0, only=("diffusion",))


class Marker:
    """A pickle that, when unpickled by a code-running loader, creates `path`."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self):
        return os.system, (f"touch {self.path}",)


@pytest.mark.parametrize("content", ["crafted", "truncated", "empty", "garbage", "foreign"])
def test_a_checkpoint_is_read_as_data_and_an_unreadable_one_is_one_line(tmp_path, content):
    path, marker = tmp_path / CHECKPOINT, tmp_path / "ran"
    if content == "crafted":
        torch.save({"identity": Marker(marker), "loops": {}}, path)
    elif content == "truncated":
        torch.save({"identity": {}, "loops": {"x": torch.zeros(1000)}}, path)
        path.write_bytes(path.read_bytes()[:300])
    elif content == "foreign":
        torch.save([1, 2, 3], path)
    else:
        path.write_bytes(b"" if content == "empty" else pickle.dumps("not a checkpoint") * 7)
    with pytest.raises(UserError, match=f"^{path} is no .*checkpoint.*remove it to start afresh$"):
        Checkpoints(path, {}, resume=True)
    assert not marker.exists()


def test_a_killed_run_leaves_output_as_it_was_and_a_finished_one_replaces_it_whole(tmp_path, monkeypatch):
    out = tmp_path / "weights"
    first = train(out, TINY, ONLY)
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}

    def refused(*_args, **_kwargs):
        raise OSError(28, "No space left on device", str(folders.staging(out) / "diffusion.safetensors"))

    with monkeypatch.context() as patch:
        patch.setattr(training.models, "save", refused)
        with pytest.raises(OutputError, match=r"diffusion\.safetensors: No space left on device$"):
            train(out, replace(TINY, seed=1), ONLY)
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()} == before
    second = train(out, replace(TINY, seed=1), ONLY)
    assert second["schedule"]["seed"] == 1 != first["schedule"]["seed"]
    assert (out / "diffusion.safetensors").read_bytes() != before["diffusion.safetensors"]
    assert not folders.staging(out).exists() and not (tmp_path / ".weights.replaced").exists()


def test_a_kill_inside_the_swap_is_undone_by_the_next_run(tmp_path):
    out = tmp_path / "weights"
    train(out, TINY, ONLY)
    os.replace(out, tmp_path / ".weights.replaced")  # killed between the swap's two renames
    with folders.staged(out):
        assert (out / "train.json").exists()  # the old OUTPUT is back before the run builds anything


@pytest.mark.parametrize("case", ["user files", "committed", "device", "infinite", "model", "draw", "spacing"])
def test_what_a_run_must_not_touch_or_cannot_run_is_refused_before_any_work(tmp_path, case):
    out = tmp_path / "out"
    schedule, run = TINY, ONLY
    if case == "user files":
        (out / "sub").mkdir(parents=True)
        for name in ("user_notes.txt", "sub/keep.txt", "train.json"):
            (out / name).write_text("mine")
    elif case == "committed":
        out = WEIGHTS
    elif case == "device":
        run = replace(ONLY, device=f"cuda:{torch.cuda.device_count() + 6}")
    elif case == "infinite":
        schedule = replace(TINY, min_snr_gamma=float("inf"))
    elif case == "model":
        run = replace(ONLY, only=("diffusion", "unet"))
    else:
        schedule = replace(TINY, **{case: "sideways"})
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    committed = {p.name: p.stat().st_mtime_ns for p in WEIGHTS.iterdir()}
    with pytest.raises(UserError, match={"user files": "holds files no training run writes \\(sub, user_notes.txt\\)",
                                         "committed": "holds the committed weights", "device": "GPUs torch sees",
                                         "infinite": "min_snr_gamma: a schedule's numbers are finite",
                                         "model": "no model \\['unet'\\] to train: the models are vae, diffusion",
                                         "draw": "draw 'sideways': scenes are drawn as a stream or from a pool",
                                         "spacing": "spacing 'sideways': .* leading or trailing"}[case]):
        train(out, schedule, run)
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before
    assert {p.name: p.stat().st_mtime_ns for p in WEIGHTS.iterdir()} == committed


def test_the_command_needs_an_output_and_refuses_the_committed_weights_in_one_line(tmp_path):
    assert_one_error(cfgen(tmp_path, "toy-world", "train"), "Missing argument 'output'")
    assert_one_error(cfgen(tmp_path, "toy-world", "train", str(WEIGHTS), "--diffusion-steps", "4", "--only",
                           "diffusion"), "holds the committed weights")
