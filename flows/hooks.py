"""What each table stage runs (`tasks.stages` declares the stage and names none of it): its flow, the check before
it and how its result is shown. A stage's entry imports its own flow module when the stage runs, so listing the
commands, or running another stage, imports none of it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import Any


@dataclass(frozen=True)
class Hooks:
    flow: Callable[[Any], Any]  # flow(params): a Prefect flow (run under one API), or a plain function
    check: Callable[[Any], None] | None = None  # check(params): before its models' pre-flight and the flow
    show: Callable[[Any], None] | None = None  # show(result)


def _params() -> Hooks:
    from flows import params

    return Hooks(params.check_params, show=params.show)


def _judge() -> Hooks:
    from flows import judge

    return Hooks(judge.judge_flow, judge.check, judge.show)


def _truth() -> Hooks:
    from flows import truth

    return Hooks(truth.truth_flow, truth.check, truth.show)


def _validation_tasks() -> Hooks:
    from flows import validation

    return Hooks(validation.validation_tasks_flow, show=validation.show_tasks)


def _validation() -> Hooks:
    from flows import validation

    return Hooks(validation.validation_flow, validation.check_export, validation.show_results)


def _evaluate() -> Hooks:
    from flows import evaluation

    return Hooks(evaluation.evaluate_flow, show=evaluation.show)


def _report() -> Hooks:
    from flows.release import report

    return Hooks(report.report_flow, show=report.show)


def _export() -> Hooks:
    from flows.release import export

    return Hooks(export.export_flow, show=export.show)


def _mixtures() -> Hooks:
    from flows.release import mixtures

    return Hooks(mixtures.mixtures_flow, show=mixtures.show)


def _datasheet() -> Hooks:
    from flows.release import datasheet

    return Hooks(datasheet.datasheet_flow, datasheet.check)


def _gallery() -> Hooks:
    from flows.release import gallery

    return Hooks(gallery.gallery, gallery.check, gallery.show)


def _removal_masks() -> Hooks:
    from flows.engine.console import show_json
    from flows.removal import masks

    return Hooks(masks.removal_masks_flow, show=show_json)


def _removal_captions() -> Hooks:
    from flows.engine.console import show_json
    from flows.removal import captions

    return Hooks(captions.removal_captions_flow, show=show_json)


def _inpaint() -> Hooks:
    from flows.engine.console import show_json
    from flows.removal import inpaint

    return Hooks(inpaint.inpaint_flow, show=show_json)


def _removal_selection() -> Hooks:
    from flows.engine.console import show_json
    from flows.removal import selection

    return Hooks(selection.removal_selection_flow, show=show_json)


def _removal_export() -> Hooks:
    from flows.engine.console import show_json
    from flows.removal import export

    return Hooks(export.removal_export_flow, show=show_json)


HOOKS: dict[str, Callable[[], Hooks]] = {
    "params": _params, "judge": _judge, "truth": _truth, "validation_tasks": _validation_tasks,
    "validation": _validation, "evaluate": _evaluate, "report": _report, "export": _export, "mixtures": _mixtures,
    "datasheet": _datasheet, "gallery": _gallery, "removal_masks": _removal_masks,
    "removal_captions": _removal_captions, "inpaint": _inpaint, "removal_selection": _removal_selection,
    "removal_export": _removal_export}
"""Table stage name -> its hooks, each a function whose import a reader and a type checker follow
(`tests/core/test_stages.py`: one entry for every declared table stage, and none besides)."""


@cache
def hooks(name: str) -> Hooks:
    """Table stage `name`'s hooks, its flow module imported (and no other stage's); made once per process (its
    command, `runners.api_for` and `runners.run_table` each ask)."""
    if name not in HOOKS:
        raise ValueError(f"table stage {name} has no hooks: its entry goes in flows.hooks.HOOKS")
    return HOOKS[name]()
