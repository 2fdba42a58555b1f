"""The Launch page offers a proposer installed from outside Crucible's tree, with its own setting's field."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from plugins import TOY_PROPOSER, TOY_PROPOSER_ENTRY, forget, install


@pytest.fixture
def plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    install(TOY_PROPOSER, TOY_PROPOSER_ENTRY, tmp_path / "plugins", monkeypatch)
    yield tmp_path
    forget("toy_proposer")


def test_the_launch_form_offers_it_and_its_setting(plugin: Path, open_page) -> None:
    at = open_page(f"sqlite:///{plugin / 'runs.db'}", "views/launch.py")
    assert "toy" in at.selectbox(key="proposer").options
    at.selectbox(key="proposer").set_value("toy").run()
    assert at.number_input(key="setting-toy_weight").value == 1.0
