"""Bad configuration gets one line, never a traceback: every command started against a catalog whose port is
closed, or whose PostgreSQL password is wrong (the real server on the machine), a lake catalog that refuses,
or an S3 endpoint that refuses, says the setting to fix, its value without the password and the server's own
reason, and exits with code 5. `--debug` or MEDALLION_DEBUG=1 shows the traceback. A dataset argument is
checked before Spark starts."""

from __future__ import annotations

import socket
import time

import click
import pytest
from click.testing import CliRunner

from medallion_assets.cli import main
from medallion_assets.cli.common import EXIT_CONFIGURATION, EXIT_INVALID
from medallion_assets.cli.configuration import unreachable_service
from medallion_assets.storage.warehouse import warehouse_from_url
from tests.conftest import SEED

PASSWORD = "Wr0ngPassw0rd"


def closed_port() -> int:
    """A loopback port nothing listens on: connecting to it is refused at once."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def commands(group: click.Group = main, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Every command of the CLI, by its words: those imported only when invoked too."""
    found = []
    context = click.Context(group)
    for name in group.list_commands(context):
        command = group.get_command(context, name)
        if isinstance(command, click.Group):
            found += commands(command, (*path, name))
        else:
            found.append((*path, name))
    return found


def arguments(tmp_path) -> dict[tuple[str, ...], list[str]]:
    """Arguments each command acts on: the seed catalog's names, files that exist."""
    sql = tmp_path / "one.sql"
    sql.write_text("insert into b select * from a;\n")
    scenario = tmp_path / "scenario.yaml"
    scenario.write_text("{}\n")
    return {
        ("catalog", "validate"): [str(SEED)],
        ("catalog", "load"): [str(SEED)],
        ("catalog", "show"): ["pipelines"],
        ("plan",): [str(SEED)],
        ("test",): ["user_events_etl"],
        ("apply",): [str(SEED)],
        ("env", "drop"): ["review"],
        ("lake", "history"): ["silver_user_events"],
        ("disable",): ["pipeline", "user_events_etl", "--reason", "drill"],
        ("enable",): ["pipeline", "user_events_etl"],
        ("sample-data",): ["--to", str(tmp_path / "raw")],
        ("run",): ["user_events_etl"],
        ("lineage", "show"): ["silver_user_events"],
        ("lineage", "history"): ["silver_user_events"],
        ("lineage", "ingest"): ["/dev/null"],
        ("lineage", "serve"): ["--port", "0"],
        ("paths",): ["silver_user_events"],
        ("onboard",): [str(sql)],
        ("profile", "set"): ["balanced"],
        ("simulate",): ["--scenario", str(scenario)],
        ("throttle", "set"): ["source", "s3", "--metric", "concurrency", "--limit", "2"],
        ("notify", "test"): ["drill"],
        ("lake", "maintain"): ["silver_user_events"],
        ("rollback",): ["silver_user_events", "--to", "1"],
    }


@pytest.fixture
def home(tmp_path, monkeypatch):
    """An empty home and Dagster instance of its own: what the commands write goes there."""
    monkeypatch.setenv("MEDALLION_HOME", str(tmp_path / "home"))
    (tmp_path / "dagster").mkdir()
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster"))
    monkeypatch.delenv("PGPASSWORD", raising=False)
    monkeypatch.delenv("MEDALLION_DEBUG", raising=False)
    return tmp_path


def assert_one_line(result, setting: str, reason: str) -> None:
    said = result.output.strip()
    assert (result.exit_code, "Traceback" not in said, len(said.splitlines())) == (
        EXIT_CONFIGURATION,
        True,
        1,
    ), said
    assert said.startswith(f"{setting}=") and reason in said, said
    assert PASSWORD not in said


@pytest.mark.parametrize(
    "catalog",
    [
        pytest.param(
            lambda: f"postgresql://postgres:{PASSWORD}@127.0.0.1:{closed_port()}/medallion", id="refused"
        ),
        pytest.param(
            lambda: f"postgresql://postgres:{PASSWORD}@127.0.0.1:5432/postgres", id="wrong-password"
        ),
    ],
)
def test_every_command_says_a_broken_catalog_in_one_line(home, catalog):
    url = catalog()
    reason = (
        "Connection refused" if "5432" not in url else 'password authentication failed for user "postgres"'
    )
    given = arguments(home)
    uses_no_catalog = {
        ("healing", "actions"),
        ("notify", "channels"),
        ("sample-data",),
        ("instance", "init"),
        ("instance", "check"),
    }
    for words in commands():
        result = CliRunner().invoke(main, [*words, *given.get(words, [])], env={"MEDALLION_CATALOG_URL": url})
        assert "Traceback" not in result.output and not isinstance(result.exception, Exception), (
            words,
            result,
        )
        assert PASSWORD not in result.output, words
        if words in uses_no_catalog:
            assert result.exit_code == 0, (words, result.output)
        elif words == ("simulate",):
            assert result.exit_code in (0, EXIT_INVALID, EXIT_CONFIGURATION), (words, result.output)
        else:
            assert_one_line(result, "MEDALLION_CATALOG_URL", reason)


def test_a_refusing_lake_catalog_s3_endpoint_and_warehouse_are_named(home):
    runner = CliRunner()
    assert runner.invoke(main, ["catalog", "load", str(SEED)]).exit_code == 0
    port = closed_port()
    lake = f"postgresql://postgres:{PASSWORD}@127.0.0.1:{port}/lake"
    result = runner.invoke(
        main, ["rollback", "silver_user_events", "--to", "1"], env={"MEDALLION_LAKE_CATALOG": lake}
    )
    assert_one_line(result, "MEDALLION_LAKE_CATALOG", "Connection refused")
    assert "sqlalche.me" not in result.output
    s3 = {
        "AWS_ENDPOINT_URL_S3": f"http://127.0.0.1:{port}",
        "AWS_ACCESS_KEY_ID": "test",
        "AWS_SECRET_ACCESS_KEY": "test",
    }
    result = runner.invoke(main, ["sample-data", "--to", "s3://medallion-raw/drill"], env=s3)
    assert_one_line(result, "AWS_ENDPOINT_URL_S3", "Could not connect to the endpoint URL")
    # The warehouse's own connection, as `medallion demo` and a run's load open it.
    warehouse = f"postgresql://postgres:{PASSWORD}@127.0.0.1:{port}/warehouse"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MEDALLION_WAREHOUSE_URL", warehouse)
        with pytest.raises(Exception) as refused:
            warehouse_from_url(warehouse)
        said = unreachable_service(refused.value)
    assert said is not None and said.startswith(f"MEDALLION_WAREHOUSE_URL=postgresql://postgres:{PASSWORD}@")
    assert "Connection refused" in said  # the CLI prints it through redaction.echo, which masks the password


def test_debug_shows_the_traceback(home):
    url = f"postgresql://postgres:{PASSWORD}@127.0.0.1:{closed_port()}/medallion"
    for words, env in [(["--debug", "catalog", "init"], {}), (["catalog", "init"], {"MEDALLION_DEBUG": "1"})]:
        result = CliRunner().invoke(main, words, env={"MEDALLION_CATALOG_URL": url, **env})
        assert result.exit_code == 1 and isinstance(result.exception, Exception), result.output
        assert "Connection refused" in str(result.exception)


def test_lake_maintain_refuses_an_unknown_dataset_before_spark_starts(home):
    runner = CliRunner()
    assert runner.invoke(main, ["catalog", "load", str(SEED)]).exit_code == 0
    started = time.monotonic()
    result = runner.invoke(main, ["lake", "maintain", "nope"])
    assert (result.exit_code, result.output) == (
        EXIT_INVALID,
        "unknown dataset 'nope': no target of the catalog has it\n",
    )
    assert time.monotonic() - started < 5, "refused before a Spark session starts"
