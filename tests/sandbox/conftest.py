"""The backends as fixtures: Docker is skipped with its reason where it cannot run, unless it is required."""

from __future__ import annotations

import os

import pytest

from sandbox.base import SandboxUnavailable
from sandbox.docker import DockerSandbox
from sandbox.process import ProcessSandbox

REQUIRE_DOCKER = "CRUCIBLE_REQUIRE_DOCKER"
"""Set to 1 (as .ci/run does) to fail, not skip, the docker tests when no engine or image is there."""


@pytest.fixture(scope="session")
def process_box() -> ProcessSandbox:
    return ProcessSandbox()


@pytest.fixture(scope="session")
def docker_box() -> DockerSandbox:
    try:
        return DockerSandbox()
    except SandboxUnavailable as exc:
        if os.environ.get(REQUIRE_DOCKER) == "1":
            pytest.fail(f"{REQUIRE_DOCKER}=1 but the Docker backend cannot run: {exc}")
        pytest.skip(f"the Docker backend cannot run here: {exc}")
