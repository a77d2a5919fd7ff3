"""The manifest: every DVC stage, declared once in `STAGES` (a `Stage` or `TableStage`, `tasks.stages.kinds`), and
every params section (`Sections`, each a class beside its stage's logic). A declaration imports no stage logic, no
flow and no model library (a data stage names its logic as `"module:name"` entries; a table stage names no flow:
`flows.hooks` holds what it runs; polars schemas only), so `cfgen --help`, the DAG and the release stages read every
declaration and run no stage's code, and a command loads only the logic of the stage it runs and the sections it
reads. Its CLI command, the whole-DAG flow's order, the caption steps and `dvc.yaml`'s stages derive from it
(`tests/core/test_stages.py` checks `dvc.yaml` against it).

A stage's name is its DVC stage and, with `-` for `_`, its CLI command; `reads` are the params sections it reads (its
command assembles those and the shared ones: an edit to another section's module is none of its code), `after` the
stages whose outputs it reads.
"""

from __future__ import annotations

import importlib
from dataclasses import replace
from functools import cache
from graphlib import TopologicalSorter
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import create_model

from tasks.core import params as core
from tasks.core import schemas
from tasks.core.errors import UserError
from tasks.stages.kinds import FIRST, Stage, TableStage

if TYPE_CHECKING:  # the sections, as typed references `Sections` names; a command imports the ones it reads
    import tasks.demo.params
    import tasks.evaluation.params
    import tasks.image.params
    import tasks.judge.params
    import tasks.release.params
    import tasks.removal.params
    import tasks.text.params
    import tasks.toyworld.params
    import tasks.validation.params
    from tasks.core.params import Section

CAPTIONS, IMAGES = "ingest", "generate"  # the caption steps run between them (`caption_steps`)


class Sections:
    """Every params section but the shared ones (`tasks.core.params.SHARED`), in `params.yaml`'s order: its name and
    its class. Read, not instantiated: `section` imports a class when a command assembles it."""

    tiny_models: tasks.demo.params.TinyModelsParams
    sites: tasks.text.params.SitesParams
    saliency: tasks.text.params.SaliencyParams
    candidates: tasks.text.params.CandidatesParams
    relations: tasks.text.params.RelationsParams
    similarity: tasks.text.params.SimilarityParams
    perplexity: tasks.text.params.PerplexityParams
    generate: tasks.image.params.GenerateParams
    selection: tasks.image.params.SelectionParams
    judge: tasks.judge.params.JudgeParams
    truth: tasks.toyworld.params.TruthParams
    export: tasks.release.params.ExportParams
    validation: tasks.validation.params.ValidationParams
    evaluate: tasks.evaluation.params.EvaluateParams
    mixtures: tasks.release.params.MixturesParams
    datasheet: tasks.release.params.DatasheetParams
    gallery: tasks.release.params.GalleryParams
    synthetic_coco: tasks.demo.params.SyntheticCocoParams
    removal_masks: tasks.removal.params.RemovalMasksParams
    removal_captions: tasks.removal.params.RemovalCaptionsParams
    inpaint: tasks.removal.params.InpaintParams
    removal_selection: tasks.removal.params.RemovalSelectionParams


if TYPE_CHECKING:
    class Params(core.Params, Sections):
        """A command's params as a checker sees them: the shared sections and every section, typed (a command holds
        the ones its stage reads, `tasks.config.load_params`)."""
else:
    Params = core.Params


SAMPLE_CODE = ("tasks.image.render:load_models", "tasks.image.render:canonical", "tasks.image.render:Batcher")
"""What a sample's render and measurement execute (both image stages key it)."""

STAGES: tuple[Stage | TableStage, ...] = (
    TableStage("params",
               help="Validate every section of the params file and stamp it (paths.params_checked): every DVC stage "
                    "depends on the stamp, so a typo anywhere stops `dvc repro` before any stage works or loses an "
                    "output."),
    # the data stages, one chain: captions -> edit sites -> ... -> counterfactual captions -> samples -> selected
    Stage("ingest", data="captions", output=schemas.CAPTIONS, rejects=schemas.CAPTIONS_REJECTS,
          module="tasks.text.ingest", code=("tasks.text.ingest:read_captions",), reads=()),
    Stage("sites", data="sites", output=schemas.SITES, rejects=schemas.SITES_REJECTS, module="tasks.text.sites",
          input=schemas.CAPTIONS, after="ingest", behaviours=("sites",)),
    Stage("saliency", data="salient_sites", output=schemas.SITES, rejects=schemas.SITES_REJECTS,
          module="tasks.text.saliency", input=schemas.SITES, after="sites"),
    Stage("candidates", data="candidates", output=schemas.CANDIDATES, rejects=schemas.rejects(schemas.CANDIDATES),
          module="tasks.text.candidates", input=schemas.SITES, after="saliency",
          behaviours=("check_fill", "rewrite", "defects")),
    Stage("relations", data="relations", output=schemas.CANDIDATES, rejects=schemas.rejects(schemas.CANDIDATES),
          module="tasks.text.relations", input=schemas.CANDIDATES, after="candidates"),
    Stage("similarity", data="similarity", output=schemas.SIMILARITY, rejects=schemas.rejects(schemas.SIMILARITY),
          module="tasks.text.similarity", input=schemas.CANDIDATES, after="relations"),
    Stage("perplexity", data="counterfactual_captions", output=schemas.COUNTERFACTUALS,
          rejects=schemas.COUNTERFACTUALS_REJECTS, module="tasks.text.perplexity", input=schemas.SIMILARITY,
          after="similarity", reads=("perplexity", "sites")),
    Stage("generate", data="samples", output=schemas.SAMPLES, rejects=schemas.SAMPLES_REJECTS,
          module="tasks.image.generate", input=schemas.PAIR, after="perplexity", code=SAMPLE_CODE,
          reads=("generate", "selection")),
    Stage("selection", data="selected", output=schemas.SELECTED, rejects=schemas.SELECTED_REJECTS,
          module="tasks.image.selection", input=schemas.SAMPLES, after="generate", code=SAMPLE_CODE,
          reads=("selection", "generate")),
    # the table stages (what each runs: `flows.hooks`)
    TableStage("judge", after=("selection",), reads=("judge",), models=("judge",), sharded=True,
               help="The VLM judge: four yes/no questions per selected pair (cached per pair), the verdict from "
                    "judge.thresholds (reject reasons judge_*) and its agreement with the Label Studio labels "
                    "(paths.metrics/judge.json)."),
    TableStage("truth", after=("generate", "judge", "selection"),
               reads=("truth", "generate", "selection", "judge", "tiny_models"), sharded=True,
               help="The toy world's truth of a demo run: every generated sample re-rendered (with and without "
                    "attention sharing) and every selected pair read back by the checker (paths.metrics/truth.json: "
                    "pair_accuracy, minimality, p2p_gain, filter_lift)."),
    TableStage("validation_tasks", after=("selection",), reads=("validation",),
               help="Label Studio tasks (one per generated image) and labeling config."),
    TableStage("validation", after=("selection",), reads=("validation",),
               help="Read Label Studio's export: Table 1, Fleiss' kappa, the validated subset."),
    TableStage("evaluate", after=("inpaint", "removal_captions", "removal_selection", "selection", "validation"),
               reads=("evaluate", "generate"), models=("evaluate",),
               help="Zero-shot retrieval R@k and ITM score differences of every `evaluate.models` entry on the "
                    "selected pairs (and ODmAP@k on the object-removal pairs)."),
    TableStage("report", after=("truth",), after_steps=True, reads=("sites", "similarity", "selection"),
               help="reports/metrics.json, figures and plot data for the current run."),
    TableStage("export", after=("judge", "perplexity", "selection", "validation"),
               reads=("export", "candidates", "similarity", "perplexity", "generate", "judge"),
               help="Write the selected pairs as a Hugging Face `datasets` folder (images embedded)."),
    TableStage("mixtures", after=("selection",), reads=("mixtures",),
               help="Build the base / medium / all training mixtures as `datasets` configs."),
    TableStage("datasheet",  # reads every section
               after=("evaluate", "export", "judge", "mixtures", "perplexity", "report", "truth", "validation"),
               help="Generate the datasheet and the dataset card that embeds it."),
    TableStage("gallery", after_steps=True,
               after=("inpaint", "judge", "removal_captions", "removal_masks", "removal_selection", "report", "truth",
                      "validation"),
               reads=("gallery",),
               help="The static pair gallery (paths.gallery): every accepted pair, the rejects of every stage, the "
                    "object-removal pairs and the run's funnel; open its index.html from the file system or any "
                    "static host."),
    # object removal
    TableStage("removal_masks", reads=("removal_masks",),
               help="Object removal: which (image, class) pairs to remove, from the COCO instances file."),
    TableStage("removal_captions", after=("removal_masks",), reads=("removal_captions",),
               help="Object removal: the edited captions and the ODmAP gallery."),
    TableStage("inpaint", after=("removal_captions",), reads=("inpaint",), models=("inpaint",),
               help="Object removal: fill each removed region (cached per edit)."),
    TableStage("removal_selection", after=("inpaint",), reads=("removal_selection",), models=("removal_selection",),
               help="Object removal: the CLIP check and the splits."),
    TableStage("removal_export", after=("inpaint", "removal_captions", "removal_masks", "removal_selection"),
               reads=("export", "removal_masks", "removal_captions", "inpaint", "removal_selection"),
               help="Object removal: the pairs as a `datasets` folder with its card."),
)
DECLARED = {declared.name: declared for declared in STAGES}


def section_names() -> tuple[str, ...]:
    """Every section's name (nothing imported)."""
    return tuple(Sections.__annotations__)


@cache
def section(name: str) -> type[Section]:
    """The class of section `name`, imported with its module (and no other section's)."""
    if name not in Sections.__annotations__:
        raise ValueError(f"no params section named {name} is declared in tasks.stages.Sections")
    module, _, attribute = Sections.__annotations__[name].rpartition(".")
    return getattr(importlib.import_module(module), attribute)


def stage(name: str) -> Stage | TableStage:
    """The declaration of stage `name` (its DVC name or its command), as `STAGES` declares it."""
    if (key := name.replace("-", "_")) not in DECLARED:
        raise UserError(f"no stage named {name}: a stage is declared in tasks.stages.STAGES")
    return DECLARED[key]


def step(name: str) -> Stage:
    """The declaration of data stage `name` (`stage`); a table stage's name is an error."""
    if not isinstance(declared := stage(name), Stage):
        raise ValueError(f"stage {name} is a table stage, not a data stage")
    return declared


def table(name: str) -> TableStage:
    """The declaration of table stage `name` (`stage`); a data stage's name is an error."""
    if not isinstance(declared := stage(name), TableStage):
        raise ValueError(f"stage {name} is a data stage, not a table stage")
    return declared


@cache
def stages() -> dict[str, Stage | TableStage]:
    """Every stage, in DAG order (a topological walk over `after`), a table stage's `after_steps` resolved."""
    loaded = dict(sorted(DECLARED.items()))
    data = {name for name, s in loaded.items() if isinstance(s, Stage)}
    loaded |= {name: replace(s, after=tuple(sorted(data | set(s.after))), after_steps=False)
               for name, s in loaded.items() if isinstance(s, TableStage) and s.after_steps}
    order = TopologicalSorter({name: list(s.needs) for name, s in loaded.items()}).static_order()
    return {name: loaded[name] for name in order}


def steps() -> dict[str, Stage]:
    """The data stages (ingest, the caption steps, generate, selection), in DAG order."""
    return {name: s for name, s in stages().items() if isinstance(s, Stage)}


def caption_steps() -> tuple[str, ...]:
    """The sharded caption steps, in DAG order: the data stages, ingest aside, that the image stage reads through."""
    read: set[str] = set()
    todo = [IMAGES]
    while todo:
        read |= (new := set(stages()[todo.pop()].needs) - read)
        todo += new
    return tuple(name for name in steps() if name in read and name != CAPTIONS)


def skip_reason(name: str, params) -> str | None:
    """Why stage `name` passes its input through unchanged, loading no model, or None when it runs: saliency needs
    to be enabled and to have real images."""
    if name != "saliency":
        return None
    if not params.saliency.enabled:
        return "saliency.enabled is false"
    return None if params.paths.source_images else "paths.source_images is not set: no real images to rank with"


def _paths() -> type[core.PathsParams]:
    """`PathsParams` with a `Path` field for each data stage's output (`data`) it lacks, so a new stage's output path
    is one line under `paths:` in `params.yaml` (validated, a typo in it named, as every other)."""
    lacking = {s.data: (Path, ...) for s in STAGES
               if isinstance(s, Stage) and s.data not in core.PathsParams.model_fields}
    if not lacking:
        return core.PathsParams
    return create_model("Paths", __base__=core.PathsParams, __module__=__name__,  # type: ignore[call-overload]
                        **lacking)


Paths = _paths()
