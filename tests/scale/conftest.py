"""A fresh PostgreSQL database per postgres-marked test, on the server CRUCIBLE_TEST_POSTGRES_URL names
(.ci/run starts a throw-away one); skipped without it, failed instead where CRUCIBLE_REQUIRE_POSTGRES=1."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url


@pytest.fixture
def postgres_url() -> Iterator[str]:
    server = os.environ.get("CRUCIBLE_TEST_POSTGRES_URL")
    if not server:
        if os.environ.get("CRUCIBLE_REQUIRE_POSTGRES") == "1":
            pytest.fail("CRUCIBLE_REQUIRE_POSTGRES=1 but CRUCIBLE_TEST_POSTGRES_URL names no server")
        pytest.skip("no PostgreSQL server: set CRUCIBLE_TEST_POSTGRES_URL (.ci/run starts one)")
    name = f"crucible_test_{uuid.uuid4().hex[:8]}"
    admin = create_engine(server, isolation_level="AUTOCOMMIT")
    with admin.connect() as connection:
        connection.execute(text(f'CREATE DATABASE "{name}"'))
    try:
        yield make_url(server).set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as connection:
            connection.execute(text(f'DROP DATABASE "{name}" WITH (FORCE)'))
        admin.dispose()
