"""``manage.py export_dataset``: every user's scored runs as JSON lines, filtered by
score, agent and period; a bad option is a clear error and writes nothing."""

from __future__ import annotations

import io
import json

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from goaai.runtime.vocabulary import ScoreKind, ScoreSource
from runs_app.models import Score
from tests.factories import RunFactory, SessionFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def scored(owner, other_user):
    alices = RunFactory(session=SessionFactory(owner=owner), status="completed", input="alice's")
    bobs = RunFactory(
        session=SessionFactory(owner=other_user), status="failed", agent="concierge", input="bob's"
    )
    RunFactory(session=SessionFactory(owner=owner), status="completed", input="unscored")
    for run, value in ((alices, 5.0), (bobs, 1.0)):
        Score.objects.create(
            run=run, name="helpfulness", kind=ScoreKind.NUMERIC, value=value, source=ScoreSource.API
        )
    return alices, bobs


def export(tmp_path, *options: str) -> list[dict]:
    out = tmp_path / "scored.jsonl"
    said = io.StringIO()
    call_command("export_dataset", "--out", str(out), *options, stdout=said)
    lines = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert said.getvalue().strip() == f"Wrote {len(lines)} scored run(s) to {out}."
    return lines


def test_every_users_scored_runs_are_written_one_a_line(tmp_path, scored):
    alices, bobs = scored

    lines = export(tmp_path)

    assert [line["run_id"] for line in lines] == [str(alices.pk), str(bobs.pk)]
    assert lines[1]["scores"][0]["value"] == 1.0
    assert lines[1]["status"] == "failed"


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        (("--score", "helpfulness>=4"), ["alice's"]),
        (("--score", "helpfulness", "--score", "helpfulness<2"), ["bob's"]),
        (("--agent", "concierge"), ["bob's"]),
        (("--since", "2999-01-01"), []),
        (("--until", "2999-01-01T00:00:00+02:00"), ["alice's", "bob's"]),
    ],
)
def test_the_options_choose_the_runs(tmp_path, scored, options, expected):
    assert [line["input"] for line in export(tmp_path, *options)] == expected


def test_out_dash_writes_to_standard_output(scored, capsys):
    call_command("export_dataset", "--out", "-", "--agent", "concierge")

    [line] = capsys.readouterr().out.splitlines()
    assert json.loads(line)["input"] == "bob's"


@pytest.mark.parametrize(
    ("options", "said"),
    [
        (("--score", "helpfulness>=many"), "--score: helpfulness>= compares with a number"),
        (("--since", "last week"), "--since 'last week': expected a date"),
        (("--until", "2026-02-30"), "--until '2026-02-30': expected a date"),
    ],
)
def test_a_bad_option_is_a_clear_error_and_writes_nothing(tmp_path, scored, options, said):
    out = tmp_path / "scored.jsonl"

    with pytest.raises(CommandError, match=said.replace("(", r"\(")):
        call_command("export_dataset", "--out", str(out), *options)
    assert not out.exists()


def test_a_folder_that_does_not_exist_is_a_clear_error(tmp_path, scored):
    with pytest.raises(CommandError, match="No such file or directory"):
        call_command("export_dataset", "--out", str(tmp_path / "missing" / "x.jsonl"))
