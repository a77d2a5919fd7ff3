"""Params section of the VLM judge."""

from __future__ import annotations

from pydantic import Field, field_validator

from tasks.core.edits import EditType
from tasks.core.fields import Unit, WordPrompt, unkeyed
from tasks.core.params import Section
from tasks.core.schemas import JUDGE_QUESTIONS
from tasks.core.specs import ModelSpec


class JudgeParams(Section):
    """The VLM judge (`tasks.judge`): per selected pair four yes/no questions (I_o shows C_o's word? I_c shows C_c's?
    and the two crossed), each answer P(Yes) = softmax over the next-token logits of "Yes" and "No" (no sampling),
    and a verdict from `thresholds` (a question counts as answered yes when P(Yes) >= its threshold). Off unless
    enabled; under the paper profile its hub model needs a pinned revision, like every model that runs."""

    enabled: bool = False
    model: ModelSpec
    templates: dict[EditType, WordPrompt] = Field(description="the question per edit type; {word}: the original or the "
                                                       "substitute (insert / delete: the inserted / deleted phrase)")
    thresholds: dict[str, Unit] = unkeyed(dict.fromkeys(JUDGE_QUESTIONS, 0.5), "P(Yes) at which each question "
                                          "counts as answered yes (applied after the cache)")
    batch_size: int = unkeyed(4, "questions per forward pass; one task asks one pair's (at most 4)", ge=1)

    def idle_models(self) -> tuple[str, ...]:
        return () if self.enabled else ("model",)

    @field_validator("templates")
    @classmethod
    def _word_slot(cls, templates: dict[str, str]) -> dict[str, str]:
        if missing := [edit for edit, template in templates.items() if "{word}" not in template]:
            raise ValueError(f"the template of {', '.join(missing)} has no {{word}}")
        return templates

    @field_validator("thresholds")
    @classmethod
    def _every_question(cls, thresholds: dict[str, float]) -> dict[str, float]:
        if set(thresholds) != set(JUDGE_QUESTIONS):
            raise ValueError(f"needs exactly one threshold per question ({', '.join(JUDGE_QUESTIONS)}), got "
                             f"{', '.join(thresholds) or 'none'}")
        return thresholds
