"""Params section of the toy world's ground-truth stage."""

from __future__ import annotations

from tasks.core.specs import Frozen


class TruthParams(Frozen):
    """`cfgen truth` (`tasks.toyworld.truth`): every generated sample and selected pair read back by the toy world's
    checker. Only the demo runs on the toy world: elsewhere its captions are no world captions, so it stays off."""

    enabled: bool = False
