"""Every setting a run takes, as the front ends offer them: the run's own (settings.py) and which proposer
writes its candidates (the proposer registry's setting, its choices the installed proposers). Each
proposer's own settings come from `proposers.settings()`. Light to import: the CLI's parser is built
from it."""

from __future__ import annotations

from collections.abc import Mapping

from search import proposers, settings
from targets.base import Option

SETTINGS: tuple[Option, ...] = (*settings.SETTINGS, proposers.SETTING)
BY_NAME: Mapping[str, Option] = {s.name: s for s in SETTINGS}
