"""Ground truth of a run on the toy world: how many of its pairs are real counterfactuals, read by `checker`.

A pair (I_o, I_c) is `accurate` only when it shows its edit: I_o shows C_o and not C_c, and I_c shows C_c and not C_o,
each "not" dropped where it cannot hold (an insert's C_c entails C_o: a small red circle is a red circle), so a copy
of I_o in I_c is never accurate. It is `minimal` when accurate and every object the two captions share
stays the same and in place (`minimal`: for a count edit, the objects the two counts share). A caption that is no
world caption (`world.parse` is None) is shown by no image. Each generated sample is judged as generate rendered it
(seed, p2p fraction, guidance scale) and again without attention sharing (p2p fraction 0); each selected pair from
its exported PNGs.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace
from typing import cast

import numpy as np
import polars as pl
from scipy.optimize import linear_sum_assignment

from tasks.core import keys
from tasks.image import backends
from tasks.image.backends import Diffusion
from tasks.image.params import GenerateParams
from tasks.image.render import Batcher
from tasks.image.sampling import Sample
from tasks.toyworld import checker, world

PLACE_TOLERANCE = 0.1  # of the image side: one object "at the same place" in two images


def minimal(image_o: np.ndarray, image_c: np.ndarray, spec_o: world.Spec, spec_c: world.Spec) -> bool:
    """Both images show their spec, and what the specs share is unchanged: for each phrase index both specs have,
    its objects pair up one to one (the nearest overall; a count edit pairs as many as the smaller count) at the same
    places (± PLACE_TOLERANCE) with equal shape, colour and size, except an attribute the phrases state differently."""
    groups_o, groups_c = checker.assign(checker.objects(image_o), spec_o), checker.assign(
        checker.objects(image_c), spec_c)
    if groups_o is None or groups_c is None:
        return False
    for p_o, p_c, group_o, group_c in zip(spec_o.phrases, spec_c.phrases, groups_o, groups_c):
        kept = {"shape", "colour", "size"} - {a for a in ("shape", "colour", "size") if getattr(p_o, a) != getattr(
            p_c, a)}
        apart = np.array([[max(abs(a.x - b.x), abs(a.y - b.y)) for b in group_c] for a in group_o])
        for i, j in zip(*linear_sum_assignment(apart)):
            a, b = group_o[i], group_c[j]
            if apart[i, j] > PLACE_TOLERANCE or any(getattr(a, k) != getattr(b, k) for k in kept):
                return False
    return True


def entails(a: world.Spec | None, b: world.Spec | None) -> bool:
    """Every scene that shows `a` shows `b`: the same phrases (counts, shapes) and relation, and each colour or size
    `b` states stated alike by `a`."""
    return a is not None and b is not None and a.relation == b.relation and len(a.phrases) == len(b.phrases) and all(
        (p.count, p.shape) == (q.count, q.shape) and q.colour in (None, p.colour) and q.size in (None, p.size)
        for p, q in zip(a.phrases, b.phrases))


def judge_pair(image_o: np.ndarray, image_c: np.ndarray, caption: str, counterfactual: str) -> dict:
    """The `PAIR_TRUTH` columns of one pair: the four parts, the checker's reason for each image's own caption,
    accurate and minimal."""
    spec_o, spec_c = world.parse(caption), world.parse(counterfactual)
    reason_o, reason_c = checker.reason(image_o, spec_o), checker.reason(image_c, spec_c)
    parts = {"o_shows_o": reason_o is None, "c_shows_c": reason_c is None,
             "o_shows_c": checker.shows(image_o, spec_c), "c_shows_o": checker.shows(image_c, spec_o)}
    accurate = parts["o_shows_o"] and parts["c_shows_c"] and (not parts["o_shows_c"] or entails(spec_o, spec_c)) and (
        not parts["c_shows_o"] or entails(spec_c, spec_o))
    return {**parts, "reason_o": reason_o, "reason_c": reason_c, "accurate": accurate,
            "minimal": accurate and minimal(image_o, image_c, cast(world.Spec, spec_o), cast(world.Spec, spec_c))}


def unit(params: GenerateParams) -> keys.Unit:
    """A pair's truth as a cache unit: `pair_truth` run with the chosen backend's class (which the truth flow loads
    and renders with), the keyed generate params, the diffusion model's and VAE's content."""
    models = [spec for spec in (params.diffusion, params.vae) if spec is not None]
    return keys.unit("truth", (pair_truth, backends.chosen(params)), params, models)


def pair_content(pair: pl.DataFrame) -> str:
    """A pair's content key (rows of schemas.SAMPLES): its captions, edit type and every sample's settings."""
    return keys.digest(json.dumps(pair.select("caption", "counterfactual", "edit_type", "sample", "seed",
                                              "p2p_fraction", "guidance_scale").rows()))


def pair_truth(pair: pl.DataFrame, diffusion: Diffusion, params: GenerateParams) -> list[dict]:
    """`schemas.TRUTH_SAMPLES` rows of one pair's samples (rows of schemas.SAMPLES), each rendered as generate
    rendered it (seed, p2p fraction, guidance scale; the image stage's batching) and again with p2p fraction 0."""
    first = pair.row(0, named=True)
    caption, counterfactual = first["caption"], first["counterfactual"]
    prompts = diffusion.encode(caption, counterfactual)
    planned = [Sample(*s) for s in zip(pair["seed"], pair["p2p_fraction"], pair["guidance_scale"])]

    def images(samples: list[Sample]) -> np.ndarray:
        return np.concatenate([rendered.images for _, rendered in Batcher(params.batch_samples).render(
            diffusion, prompts, samples, params)])

    shared, alone = images(planned), images([replace(s, p2p_fraction=0.0) for s in planned])
    rows = []
    for i, index in enumerate(pair["sample"]):
        without = judge_pair(alone[i][0], alone[i][1], caption, counterfactual)
        rows.append({"caption_id": first["caption_id"], "sample": index, "edit_type": first["edit_type"],
                     "caption": caption, "counterfactual": counterfactual,
                     **judge_pair(shared[i][0], shared[i][1], caption, counterfactual),
                     "accurate_no_p2p": without["accurate"], "minimal_no_p2p": without["minimal"]})
    return rows


def selected_truth(selected: pl.DataFrame, load: Callable[[str], np.ndarray], schema: dict) -> pl.DataFrame:
    """`schema` (schemas.TRUTH) rows of every selected pair, from its PNGs (`load(name)`)."""
    return pl.DataFrame([{**{k: r[k] for k in ("caption_id", "sample", "edit_type", "caption", "counterfactual")},
                          **judge_pair(load(r["image_o"]), load(r["image_c"]), r["caption"], r["counterfactual"])}
                         for r in selected.iter_rows(named=True)], schema=schema)
