"""The Dagster instance seedwheel writes: its dagster.yaml follows the settings, and with the production database
its runs live in PostgreSQL."""

import logging
from dataclasses import replace

import dagster as dg
import psycopg2
import pytest

from core.database import DatabaseUnavailable
from core.signals import dispositions_kept
from pipeline.instance import GENERATED, open_instance
from pipeline.runs import materialize
from tests.services import free_port, fresh_database


def test_a_generated_dagster_yaml_follows_the_database_setting_and_a_users_own_is_kept(settings, postgres_url):
    config = settings.dagster_home / "dagster.yaml"
    open_instance(settings).dispose()
    assert config.read_text().startswith(GENERATED) and "postgres" not in config.read_text()

    on_postgres = replace(settings, database_url=fresh_database(postgres_url))
    with open_instance(on_postgres) as instance:
        assert type(instance.run_storage).__name__ == "PostgresRunStorage"
    assert "env: SEEDWHEEL_DATABASE_URL" in config.read_text()
    assert on_postgres.database_url.split("@")[0].split(":")[-1] not in config.read_text()  # the password is not

    open_instance(settings).dispose()  # back to local storage
    assert "postgres" not in config.read_text()
    config.write_text(config.read_text().removeprefix(GENERATED))  # now the user's file: used as it is
    with open_instance(on_postgres) as instance:
        assert type(instance.run_storage).__name__ == "SqliteRunStorage"


def test_an_unreachable_database_names_the_variable_and_hides_the_password(settings):
    unreachable = replace(settings, database_url=f"postgresql://sw:hunter2@127.0.0.1:{free_port()}/sw")
    with pytest.raises(DatabaseUnavailable, match=r"the Dagster instance: .*sw:\*\*\*@127\.0\.0\.1") as caught:
        open_instance(unreachable)
    assert "SEEDWHEEL_DATABASE_URL" in caught.value.hint and "hunter2" not in str(caught.value)


def test_runs_are_recorded_in_the_database(settings, postgres_url):
    database = fresh_database(postgres_url)
    summary = materialize(replace(settings, database_url=database), "seed_tasks")
    assert summary.success, summary.failures
    with psycopg2.connect(database) as db, db.cursor() as cursor:
        cursor.execute("SELECT status FROM runs WHERE run_id = %s", (summary.run_id,))
        assert cursor.fetchone() == ("SUCCESS",)
    assert not list(settings.dagster_home.glob("**/*.db"))


def test_the_packages_progress_lines_reach_the_runs_log(settings):
    @dg.asset
    def sampled() -> None:
        logging.getLogger("training.evaluation").info("sampled %d/%d prompts", 3, 8)
        logging.getLogger("elsewhere").info("not a seedwheel package")

    with open_instance(settings) as instance, dispositions_kept():
        result = dg.materialize([sampled], instance=instance)
        messages = [entry.user_message for entry in instance.all_logs(result.run_id)]
    assert "sampled 3/8 prompts" in messages
    assert "not a seedwheel package" not in messages
