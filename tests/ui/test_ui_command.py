"""`crucible ui`: the app it serves is found without importing the ui package, and bad flags are one line."""

from __future__ import annotations

import socket

import pytest

from search import cli
from search.cli.ui import app_path, streamlit_command


def test_the_app_is_the_ui_packages_entry_file() -> None:
    path = app_path()
    assert path.name == "app.py" and path.parent.name == "ui" and path.is_file()


def test_streamlit_serves_headless_on_the_given_address_and_sends_no_statistics() -> None:
    command = streamlit_command(8123, "127.0.0.1")
    assert command[1:5] == ["-m", "streamlit", "run", str(app_path())]
    flags = dict(zip(command[5::2], command[6::2], strict=True))
    assert flags["--server.port"] == "8123"
    assert flags["--server.address"] == "127.0.0.1"
    assert flags["--server.headless"] == "true"
    assert flags["--browser.gatherUsageStats"] == "false"


@pytest.mark.parametrize("port", ["0", "70000"])
def test_a_port_out_of_range_is_one_line(port: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        cli.main(["ui", "--port", port])
    assert exited.value.code == 2
    assert capsys.readouterr().err == f"crucible: error: --port must be between 1 and 65535, got {port}\n"


def test_a_host_this_machine_does_not_have_is_one_line_and_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("streamlit", reason="needs the ui extra (streamlit)")
    with pytest.raises(SystemExit) as exited:
        cli.main(["ui", "--host", "10.255.255.1", "--port", "8765"])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("crucible: error: --host 10.255.255.1: cannot serve there") and err.count("\n") == 1


def test_a_port_in_use_is_one_line_and_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("streamlit", reason="needs the ui extra (streamlit)")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(SystemExit) as exited:
            cli.main(["ui", "--port", str(port)])
    assert exited.value.code == 2
    assert capsys.readouterr().err == (
        f"crucible: error: --port {port}: already in use on 127.0.0.1; choose another port\n"
    )


def test_a_stores_password_is_never_said_at_start_nor_drawn_on_a_page(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("streamlit", reason="needs the ui extra (streamlit)")
    url = "postgresql+psycopg://u:secretpw@127.0.0.1:5999/crucible"

    def served(path: str, argv: list[str], env: dict[str, str]) -> None:
        raise SystemExit(0)  # what the server would be started with is what matters here

    monkeypatch.setattr("os.execve", served)
    with pytest.raises(SystemExit):
        cli.main(["ui", "--db", url, "--port", str(_free_port()), "--json"])
    out, err = capsys.readouterr()
    assert "secretpw" not in out + err and "u:***@127.0.0.1" in err and "u:***@" in out

    from ui import data

    monkeypatch.setenv(data.STORE_ENV, url)
    assert data.shown_url() == "postgresql+psycopg://u:***@127.0.0.1:5999/crucible"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])
