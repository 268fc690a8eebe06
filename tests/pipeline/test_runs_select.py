"""`--select` reads a selection as `dagster asset materialize --select` does, resolved without running anything."""

import dagster as dg
import pytest
from click.testing import CliRunner

from pipeline.cli import main
from pipeline.definitions import build_definitions
from pipeline.runs import RunRequestError, selected_asset_keys
from tests.paths import quickstart_settings


@pytest.fixture(scope="module")
def defs(tmp_path_factory: pytest.TempPathFactory) -> dg.Definitions:
    """The quickstart definitions, built once for the module (resolving a selection writes nothing)."""
    root = tmp_path_factory.mktemp("select")
    return build_definitions(quickstart_settings(root))


def names(defs: dg.Definitions, select: str | None, partition: str | None = None) -> set[str]:
    return {key.to_user_string() for key in selected_asset_keys(defs, select, partition)}


@pytest.mark.parametrize(
    ("select", "expected"),
    [
        # A comma list is the union of its parts; each multi-asset brings its sibling (the rejects).
        ("seed_tasks,task_variants", {"seed_tasks", "seed_rejects", "task_variants", "variant_rejects"}),
        # Spaces after the commas, as people type them.
        ("seed_tasks, task_variants", {"seed_tasks", "seed_rejects", "task_variants", "variant_rejects"}),
        # A key with `+`: itself and its children one level down.
        ("judged_tasks+", {"judged_tasks", "train_tasks", "eval_tasks", "failure_eval"}),
        # `+` before the key: its parents one level up.
        ("+judged_tasks", {"judged_tasks", "deduplicated_tasks", "judge_calibration"}),
        # A group, and a group beside a key in one list.
        ("group:judging", {"judge_calibration", "judged_tasks"}),
        ("group:judging,promotion", {"judge_calibration", "judged_tasks", "promotion"}),
        # The expression syntax still works, and inside a list too.
        ("key:checkpoint_eval or key:promotion", {"checkpoint_eval", "promotion"}),
        (
            "seed_tasks,key:checkpoint_eval or key:promotion",
            {"seed_tasks", "seed_rejects", "checkpoint_eval", "promotion"},
        ),
    ],
)
def test_a_selection_resolves_as_dagster_asset_materialize_reads_it(defs, select, expected):
    assert names(defs, select) == expected


def test_no_selection_is_every_unpartitioned_asset(defs):
    every = names(defs, None)
    assert {"seed_tasks", "promotion", "failure_tasks"} <= every
    assert not every & {"failure_logs", "failure_rejects"}  # partitioned by failure-log file


def test_a_partition_keeps_the_partitioned_assets_of_a_list(defs):
    assert names(defs, "seed_tasks,failure_logs", partition="a.jsonl") == {
        "failure_logs",
        "production_traffic",
        "failure_rejects",
    }


@pytest.mark.parametrize(
    ("select", "message"),
    [
        ("seed_tasks,no_such_asset", "matches no asset"),  # one unknown key in a list
        ("seed_tasks,", "not a Dagster asset selection"),  # an empty part
        ("seed_tasks,checkpoint_eval or promotion", "not a Dagster asset selection"),  # bare names need `key:`
    ],
)
def test_a_bad_selection_gets_a_clear_error(defs, select, message):
    with pytest.raises(RunRequestError, match=message) as error:
        selected_asset_keys(defs, select)
    assert repr(select) in str(error.value)


def test_the_cli_reports_a_bad_list_without_a_traceback(settings):
    result = CliRunner().invoke(main, ["run", "--select", "seed_tasks,no_such_asset", "--home", str(settings.home)])
    assert result.exit_code == 2
    assert "matches no asset" in result.output and "no_such_asset" in result.output
    assert "Traceback" not in result.output
