"""The run and session timelines of the admin, through their admin URLs."""

from __future__ import annotations

import datetime as dt
import json
import re
import uuid

import pytest
from django.db import connection
from django.db.models import Max
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from goaai.runtime import rt
from runs_app import services as run_services
from runs_app.models import Run, ToolCall
from runs_app.timeline.values import LOAD_CAP
from sessions_app.eventlog import event_append
from sessions_app.models import RunEvent, Session
from tests.factories import RunFactory, SessionFactory, ToolCallFactory, TurnFactory


def run_url(run_id, **query) -> str:
    url = reverse("admin:runs_app_run_timeline", args=[run_id])
    if query:
        url += "?" + "&".join(f"{k}={v}" for k, v in query.items())
    return url


def session_url(session_id, **query) -> str:
    url = reverse("admin:sessions_app_session_timeline", args=[session_id])
    if query:
        url += "?" + "&".join(f"{k}={v}" for k, v in query.items())
    return url


def seqs(response) -> list[int]:
    """The seq of each row of the event table, in page order."""
    return [int(s) for s in re.findall(r'<tbody id="seq-(\d+)"', response.content.decode())]


def add_events(run: Run, types_and_data: list[tuple[str, dict]], *, start=None) -> list[RunEvent]:
    """Append events to ``run``'s session log in one statement (for big fixtures)."""
    session = run.session
    last = RunEvent.objects.filter(session=session).aggregate(m=Max("seq"))["m"] or 0
    events = RunEvent.objects.bulk_create(
        RunEvent(session=session, run=run, seq=last + i, type=t, data=d)
        for i, (t, d) in enumerate(types_and_data, start=1)
    )
    Session.objects.filter(pk=session.pk).update(last_event_seq=last + len(types_and_data))
    return events


def tool_call_events(run: Run, count: int, per_turn: int = 10) -> None:
    """``count`` tool calls, each with its scheduled/started/succeeded events, in turns
    of ``per_turn`` calls: what a busy run's log looks like."""
    specs = []
    turn = None
    for i in range(count):
        if i % per_turn == 0:
            turn = TurnFactory(run=run, index=i // per_turn)
            specs += [
                ("turn.started", {"turn": str(turn.id), "index": turn.index, "model": "scripted"}),
                ("usage", {"turn": str(turn.id), "input_tokens": 5, "output_tokens": 2}),
            ]
        call = ToolCallFactory(turn=turn, index=i, arguments={"expression": f"{i}+1"})
        specs += [
            ("tool_call.scheduled", {"tool_call": str(call.id), "name": "calculator"}),
            ("tool_call.started", {"tool_call": str(call.id), "name": "calculator"}),
            (
                "tool_call.succeeded",
                {"tool_call": str(call.id), "name": "calculator", "result": {"value": i + 1}},
            ),
        ]
    add_events(run, specs)


# Access


@pytest.mark.django_db
def test_staff_see_the_run_timeline_and_others_are_refused(client, staff, other_user):
    run = RunFactory(status="completed")
    add_events(run, [("run.created", {"agent": "assistant", "input": "hi"})])
    url = run_url(run.id)

    client.force_login(other_user)
    refused = client.get(url)
    assert refused.status_code == 302
    assert "/admin/login/" in refused["Location"]

    client.force_login(staff)
    page = client.get(url)
    assert page.status_code == 200
    assert str(run.id) in page.content.decode()
    # The admin's chrome: the site header and breadcrumbs back to the run.
    assert "goaai operations" in page.content.decode()
    assert reverse("admin:runs_app_run_change", args=[run.id]) in page.content.decode()


@pytest.mark.django_db
def test_non_staff_are_refused_everywhere_even_when_called_directly(rf, client, other_user):
    run = RunFactory(status="completed")
    event = add_events(run, [("run.created", {"agent": "assistant", "input": "secret"})])[0]
    client.force_login(other_user)
    urls = [
        run_url(run.id),
        session_url(run.session_id),
        reverse("admin:runs_app_run_timeline_download", args=[run.id]),
        reverse("admin:runs_app_timeline_payload", args=["event", event.id]),
    ]
    for url in urls:
        response = client.get(url)
        assert response.status_code == 302, url
        assert b"secret" not in response.content
    response = client.post(reverse("admin:runs_app_run_timeline_cancel", args=[run.id]))
    assert response.status_code == 302

    # Unwrapped, the views still refuse a user who is not staff.
    from django.core.exceptions import PermissionDenied

    from runs_app import admin_timeline

    request = rf.get("/")
    request.user = other_user
    with pytest.raises(PermissionDenied):
        admin_timeline.run_timeline(request, run.id)
    with pytest.raises(PermissionDenied):
        admin_timeline.timeline_payload(request, "event", str(event.id))


@pytest.mark.django_db
def test_an_unknown_run_is_a_404(rf, staff):
    # Called directly: the site's 404 page itself is not under test here.
    from django.http import Http404

    from runs_app import admin_timeline

    request = rf.get("/")
    request.user = staff
    calls = [
        lambda: admin_timeline.run_timeline(request, uuid.uuid4()),
        lambda: admin_timeline.session_timeline(request, uuid.uuid4()),
        lambda: admin_timeline.run_download(request, uuid.uuid4()),
        lambda: admin_timeline.timeline_payload(request, "turn", str(uuid.uuid4())),
        lambda: admin_timeline.timeline_payload(request, "event", "not-a-number"),
        lambda: admin_timeline.timeline_payload(request, "memory", str(uuid.uuid4())),
    ]
    for call in calls:
        with pytest.raises(Http404):
            call()


# A real run, recorded by the runtime


@pytest.fixture
def session(owner):
    return rt.create_session(owner=owner, agent="assistant")


@pytest.mark.django_db(transaction=True)
def test_events_in_seq_order_with_elapsed_times_and_the_tool_call(
    client, staff, inline_runtime, session
):
    result = rt.run("assistant", "remember my favourite colour is green", session=session.id)
    client.force_login(staff)
    page = client.get(run_url(result.id))
    html = page.content.decode()

    expected = list(
        RunEvent.objects.filter(run_id=result.id).order_by("seq").values_list("seq", flat=True)
    )
    assert seqs(page) == expected
    # Each row is an anchor, with its time and "+elapsed since start".
    assert f'href="{run_url(result.id)}?after={expected[0] - 1}#seq-{expected[0]}"' in html
    assert re.search(r'class="tl-elapsed">\+\d+ ms<', html)
    assert "run.completed" in html
    # The tool call's name, arguments and result are on the page.
    call = ToolCall.objects.get(run_id=result.id)
    assert "memory_store" in html
    assert "&quot;favourite colour&quot;" in html
    assert str(call.id) in html
    # Status, tokens, input and output in the header; Download JSON; no Cancel.
    run = Run.objects.get(pk=result.id)
    assert 'tl-status-completed">completed' in html
    assert f"{run.total_tokens} total" in html
    assert "remember my favourite colour is green" in html
    assert reverse("admin:runs_app_run_timeline_download", args=[run.id]) in html
    assert "Cancel run" not in html


@pytest.mark.django_db(transaction=True)
def test_a_turns_messages_load_from_the_payload_endpoint(client, staff, inline_runtime, session):
    result = rt.run("assistant", "calculate 2+3", session=session.id)
    turn = Run.objects.get(pk=result.id).turns.order_by("index").first()
    client.force_login(staff)
    html = client.get(run_url(result.id)).content.decode()
    messages_url = reverse("admin:runs_app_timeline_payload", args=["turn", turn.id])
    # The row links its messages; they load when it opens.
    assert f"{messages_url}?field=request_messages" in html

    messages = client.get(messages_url, {"field": "request_messages"}).json()
    assert [m["role"] for m in messages][:2] == ["system", "user"]
    assert messages[1]["content"] == "calculate 2+3"
    whole = client.get(messages_url).json()
    assert whole["model"] == "scripted"
    assert whole["usage"]["input_tokens"] == turn.input_tokens
    download = client.get(messages_url, {"field": "request_messages", "download": "1"})
    assert download["Content-Disposition"].startswith("attachment;")


@pytest.mark.django_db(transaction=True)
def test_approvals_show_who_and_when_and_waiting_is_shown_apart(
    client, staff, inline_runtime, session
):
    waiting = rt.run("assistant", "forget everything", session=session.id)
    assert waiting.status == "awaiting_input"
    call = ToolCall.objects.get(run_id=waiting.id, requires_approval=True)

    client.force_login(staff)
    html = client.get(run_url(waiting.id)).content.decode()
    assert "Waiting for input" in html
    assert "nobody yet" in html
    assert "Cancel run" in html

    rt.respond(waiting.id, tool_call=call.id, decision="approve", reason="fine by me", user=staff)
    rt.wait(waiting.id)
    call.refresh_from_db()
    html = client.get(run_url(waiting.id)).content.decode()
    # The decision row: what, who, when, why.
    assert "tool_call.decided" in html
    assert re.search(r"approved</strong> by <strong[^>]*>charlie</strong>", html)
    assert "fine by me" in html
    # The wait, apart from working time, with who answered and how long it took.
    waits = html.split('id="tl-waits-title"')[1].split("</section>")[0]
    assert "approval" in waits
    assert "charlie" in waits
    assert re.search(r'class="tl-duration">\d+ ms<', waits)
    assert "waiting for input" in html  # the header's duration splits working and waiting


@pytest.mark.django_db(transaction=True)
def test_a_question_and_its_answer(client, staff, inline_runtime, session):
    waiting = rt.run("assistant", "ask me what my name is", session=session.id)
    call = ToolCall.objects.get(run_id=waiting.id, name="ask_user")
    rt.respond(waiting.id, tool_call=call.id, answer="Ada", user=staff)
    rt.wait(waiting.id)
    client.force_login(staff)
    html = client.get(run_url(waiting.id)).content.decode()
    waits = html.split('id="tl-waits-title"')[1].split("</section>")[0]
    assert "question" in waits
    assert "What is your" in waits
    assert "charlie" in waits
    assert "answered" in waits


@pytest.mark.django_db(transaction=True)
def test_policy_decisions_are_rows_with_rule_verdict_and_reason(
    client, staff, inline_runtime, session
):
    result = rt.run("assistant", "calculate 1+1", session=session.id, labels={"tier": "free"})
    client.force_login(staff)
    page = client.get(run_url(result.id, type="policy.decision"))
    html = page.content.decode()
    event = RunEvent.objects.get(run_id=result.id, type="policy.decision")
    assert seqs(page) == [event.seq]
    assert re.search(r"rule</span> <strong>free_tier</strong>", html)
    assert re.search(r"verdict</span> <strong>tightened</strong>", html)
    assert "reason</span> " in html


@pytest.mark.django_db(transaction=True)
def test_child_runs_are_listed_with_their_statuses(client, staff, inline_runtime, owner):
    concierge = rt.create_session(owner=owner, agent="concierge")
    parent = rt.run("concierge", "ask the assistant calculate 2+3", session=concierge.id)
    child = Run.objects.get(parent_run_id=parent.id)
    client.force_login(staff)
    html = client.get(run_url(parent.id)).content.decode()
    children = html.split('id="tl-children-title"')[1].split("</section>")[0]
    assert str(child.id) in children
    assert 'tl-status-completed">completed' in children
    assert run_url(child.id) in children
    # The child links back to its parent.
    child_html = client.get(run_url(child.id)).content.decode()
    assert run_url(parent.id) in child_html


@pytest.mark.django_db(transaction=True)
def test_cancel_from_the_timeline(client, staff, inline_runtime, session):
    waiting = rt.run("assistant", "forget everything", session=session.id)
    client.force_login(staff)
    cancel = reverse("admin:runs_app_run_timeline_cancel", args=[waiting.id])
    assert client.get(cancel).status_code == 405
    response = client.post(cancel)
    assert response.status_code == 302
    assert response["Location"] == run_url(waiting.id)
    run = Run.objects.get(pk=waiting.id)
    assert run.status == "canceled"
    # The run's record names who stopped it.
    assert run.cancel_reason == f"canceled by charlie (user {staff.pk})"
    html = client.get(run_url(waiting.id)).content.decode()
    assert "Run canceled" in html
    assert "Cancel run" not in html


@pytest.mark.django_db
def test_cancel_needs_the_csrf_token(staff):
    from django.test import Client

    run = RunFactory(status="running")
    client = Client(enforce_csrf_checks=True)
    client.force_login(staff)
    response = client.post(reverse("admin:runs_app_run_timeline_cancel", args=[run.id]))
    assert response.status_code == 403
    run.refresh_from_db()
    assert run.status == "running"


# Failures, filters, paging, views


@pytest.mark.django_db
def test_a_failed_run_shows_its_failure_banner_and_failed_only_filter(client, staff):
    run = RunFactory(
        status="failed",
        error_kind="rate_limited",
        error_message="The model said: slow down <b>now</b>",
        error_retryable=True,
    )
    turn = TurnFactory(run=run, index=0)
    bad = ToolCallFactory(
        turn=turn,
        status="failed",
        result=None,
        error_kind="timeout",
        error_message="took too long",
    )
    add_events(
        run,
        [
            ("run.started", {"agent": "assistant"}),
            ("tool_call.started", {"tool_call": str(bad.id), "name": "calculator"}),
            (
                "tool_call.failed",
                {
                    "tool_call": str(bad.id),
                    "name": "calculator",
                    "error": {"kind": "timeout", "message": "took too long"},
                },
            ),
            ("run.failed", {"error": {"kind": "rate_limited", "message": "slow down"}}),
        ],
    )
    client.force_login(staff)
    page = client.get(run_url(run.id))
    html = page.content.decode()
    banner = html.split('class="tl-banner tl-banner-failed"')[1].split("</div>")[0]
    assert "rate_limited" in banner
    assert "slow down &lt;b&gt;now&lt;/b&gt;" in banner  # escaped, not markup
    assert "Retryable: yes" in banner
    assert 'tl-badge-failed">tool_call.failed' in html
    assert "took too long" in html

    failed = client.get(run_url(run.id, failed="1"))
    types = [e.type for e in RunEvent.objects.filter(seq__in=seqs(failed), run=run)]
    assert sorted(types) == ["run.failed", "tool_call.failed"]


@pytest.fixture
def canceled_mid_call(client, staff, inline_runtime, session):
    """A run an operator canceled from its timeline while a tool call had been
    running for 2.5 s: the run's end cancels the call with it."""
    run = run_services.run_create(session_id=session.id, agent="assistant", input="add slowly")
    # A lease that has already lapsed: no live worker, so the cancel takes effect at once.
    run_services.run_claim(run_id=run.id, owner="worker-1", lease_seconds=0)
    turn = run_services.turn_start(run_id=run.id, index=0, model="scripted", request_messages=[])
    call = run_services.tool_call_start(
        turn_id=turn.id, index=0, call_id="call_1", name="calculator", arguments={"a": 1}
    )
    # As if it had started 2.5 s ago (a real wait would slow the suite).
    began = timezone.now() - dt.timedelta(seconds=2.5)
    ToolCall.objects.filter(pk=call.id).update(started_at=began)
    RunEvent.objects.filter(run_id=run.id).update(created_at=began)
    client.force_login(staff)
    client.post(reverse("admin:runs_app_run_timeline_cancel", args=[run.id]))
    assert ToolCall.objects.get(pk=call.id).status == "canceled"
    return run


def event_of(run: Run, type: str) -> RunEvent:
    return RunEvent.objects.get(run_id=run.id, type=type)


def row_html(html: str, seq: int) -> str:
    """The table body of one row: the row and its details."""
    return html.split(f'<tbody id="seq-{seq}"')[1].split("</tbody>")[0]


def seconds_shown(pattern: str, html: str) -> float:
    """The duration ``pattern`` finds (its group is "1.25 s", "12 ms"...), in seconds."""
    shown = re.search(pattern, html)
    assert shown, f"no {pattern!r} in the page"
    number, unit = shown.group(1).split()
    return float(number) / (1000 if unit == "ms" else 1)


@pytest.mark.django_db(transaction=True)
def test_a_tool_call_canceled_with_its_run_has_a_canceled_row(client, canceled_mid_call):
    run = canceled_mid_call
    html = client.get(run_url(run.id)).content.decode()
    row = row_html(html, event_of(run, "tool_call.canceled").seq)
    assert 'class="tl-event tl-outcome-canceled"' in row
    assert 'tl-badge-canceled">tool_call.canceled' in row
    assert "calculator · the run canceled" in row
    # The call's panel: canceled, after running for as long as it ran.
    assert 'tl-status-canceled">canceled' in row
    assert 2.5 <= seconds_shown(r"<dt>Duration</dt><dd>([\d.]+ m?s)</dd>", row) < 10


@pytest.mark.django_db(transaction=True)
def test_a_canceled_tool_call_folds_with_its_start_and_its_real_duration(client, canceled_mid_call):
    run = canceled_mid_call
    compact = client.get(run_url(run.id, view="compact"))
    scheduled = event_of(run, "tool_call.scheduled").seq
    # Closed like a call that succeeded or failed: the cancel is folded into its row.
    assert event_of(run, "tool_call.canceled").seq not in seqs(compact)
    assert event_of(run, "tool_call.started").seq not in seqs(compact)
    call_row = row_html(compact.content.decode(), scheduled).split("</tr>")[0]
    assert 'class="tl-event tl-outcome-canceled"' in call_row
    assert 'tl-badge tl-badge-canceled">tool_call.canceled' in call_row
    assert "calculator · the run canceled" in call_row
    # From its start to the run's end, not "0 ms" of a call that looks still open.
    assert 2.5 <= seconds_shown(r'class="tl-duration">([\d.]+ m?s)<', call_row) < 10


@pytest.mark.django_db(transaction=True)
def test_failed_only_shows_a_tool_call_canceled_with_its_run(client, canceled_mid_call):
    run = canceled_mid_call
    failed = client.get(run_url(run.id, failed="1"))
    types = [e.type for e in RunEvent.objects.filter(seq__in=seqs(failed), run=run)]
    assert sorted(types) == ["run.canceled", "tool_call.canceled"]


@pytest.mark.django_db
def test_filters_in_the_url_type_text_and_newest_first(client, staff):
    run = RunFactory(status="completed")
    events = add_events(
        run,
        [
            ("run.started", {"agent": "assistant"}),
            ("memory.stored", {"key": "favourite colour", "scope": "session"}),
            ("memory.stored", {"key": "pet", "scope": "session"}),
            ("message.completed", {"role": "assistant", "text": "The colour is green"}),
            ("run.completed", {"output": "done"}),
        ],
    )
    by_type = {e.type: e.seq for e in events}
    client.force_login(staff)

    assert seqs(client.get(run_url(run.id, type="memory.stored"))) == [
        events[1].seq,
        events[2].seq,
    ]
    assert seqs(client.get(run_url(run.id, type="run.*"))) == [
        by_type["run.started"],
        by_type["run.completed"],
    ]
    assert seqs(client.get(run_url(run.id, q="colour"))) == [events[1].seq, events[3].seq]
    newest = client.get(run_url(run.id, order="desc"))
    assert seqs(newest) == sorted((e.seq for e in events), reverse=True)
    # The form shows what the URL asked for.
    html = client.get(run_url(run.id, q="colour", order="desc", failed="1")).content.decode()
    assert 'name="q" value="colour"' in html
    assert 'name="order" value="desc" checked' in html
    assert 'name="failed" value="1" checked' in html


@pytest.mark.django_db
def test_pages_of_100_with_next_and_previous(client, staff):
    run = RunFactory(status="completed")
    add_events(run, [("usage", {"input_tokens": i, "output_tokens": 0}) for i in range(250)])
    all_seqs = list(RunEvent.objects.filter(run=run).order_by("seq").values_list("seq", flat=True))
    client.force_login(staff)

    first = client.get(run_url(run.id))
    assert seqs(first) == all_seqs[:100]
    html = first.content.decode()
    next_link = re.search(r'href="(\?[^"]*)" rel="next"', html).group(1).replace("&amp;", "&")
    assert next_link == f"?after={all_seqs[99]}"
    assert 'rel="prev"' not in html
    assert "more than" not in html or "250" not in html

    second = client.get(run_url(run.id) + next_link)
    assert seqs(second) == all_seqs[100:200]
    prev_link = re.search(r'href="(\?[^"]*)" rel="prev"', second.content.decode()).group(1)
    assert seqs(client.get(run_url(run.id) + prev_link.replace("&amp;", "&"))) == all_seqs[:100]

    third = client.get(run_url(run.id, after=all_seqs[199]))
    assert seqs(third) == all_seqs[200:]
    assert 'rel="next"' not in third.content.decode()

    last = client.get(run_url(run.id, end="1"))
    assert seqs(last) == all_seqs[150:]

    # Newest first pages backwards through the log.
    newest = client.get(run_url(run.id, order="desc"))
    assert seqs(newest) == all_seqs[::-1][:100]
    older = re.search(r'href="(\?[^"]*)" rel="next"', newest.content.decode()).group(1)
    assert (
        seqs(client.get(run_url(run.id) + older.replace("&amp;", "&"))) == all_seqs[::-1][100:200]
    )


@pytest.mark.django_db
def test_the_compact_view_folds_started_and_finished_pairs_with_a_duration(client, staff):
    run = RunFactory(status="completed")
    turn = TurnFactory(run=run, index=0, input_tokens=7, output_tokens=3)
    call = ToolCallFactory(turn=turn, duration_ms=1234)
    t = str(turn.id)
    events = add_events(
        run,
        [
            ("turn.started", {"turn": t, "index": 0, "model": "scripted"}),
            ("turn.completed", {"turn": t, "index": 0, "tool_calls": 1, "latency_ms": 5}),
            ("usage", {"turn": t, "input_tokens": 7, "output_tokens": 3}),
            ("message.completed", {"turn": t, "role": "assistant", "text": "Let me add."}),
            ("tool_call.scheduled", {"tool_call": str(call.id), "name": "calculator"}),
            ("tool_call.started", {"tool_call": str(call.id), "name": "calculator"}),
            ("memory.stored", {"key": "k", "scope": "session"}),
            (
                "tool_call.succeeded",
                {"tool_call": str(call.id), "name": "calculator", "result": {"value": 2}},
            ),
        ],
    )
    client.force_login(staff)
    compact = client.get(run_url(run.id, view="compact"))
    # One row per turn, one per tool call; what is not a pair stays as it is.
    assert seqs(compact) == [events[0].seq, events[4].seq, events[6].seq]
    html = compact.content.decode()
    turn_row = html.split(f'id="seq-{events[0].seq}"')[1].split("</tr>")[0]
    assert "turn.completed" in turn_row
    assert "7 in · 3 out tokens" in turn_row
    assert "Let me add." in turn_row
    call_row = html.split(f'id="seq-{events[4].seq}"')[1].split("</tr>")[0]
    assert "tool_call.succeeded" in call_row  # the pair's end, shown in its row
    assert re.search(r'class="tl-duration">1\.23 s<', call_row)
    assert "5 events folded into their pairs" in html
    # The "all" view keeps every event.
    assert len(seqs(client.get(run_url(run.id)))) == len(events)


@pytest.mark.django_db
def test_the_raw_json_view(client, staff):
    run = RunFactory(status="completed")
    events = add_events(run, [("run.completed", {"output": "<script>x</script>"})])
    client.force_login(staff)
    html = client.get(run_url(run.id, view="raw")).content.decode()
    assert f'<li id="seq-{events[0].seq}">' in html
    assert "&quot;type&quot;: &quot;run.completed&quot;" in html
    assert "<script>x</script>" not in html
    assert "&lt;script&gt;x&lt;/script&gt;" in html


@pytest.mark.django_db
def test_large_values_are_capped_with_a_download_link(client, staff):
    run = RunFactory(status="completed")
    turn = TurnFactory(run=run, index=0)
    huge = "x" * (LOAD_CAP + 5000)
    call = ToolCallFactory(turn=turn, result={"blob": huge})
    events = add_events(
        run,
        [
            (
                "tool_call.succeeded",
                {"tool_call": str(call.id), "name": "calculator", "result": {"blob": huge}},
            )
        ],
    )
    client.force_login(staff)
    html = client.get(run_url(run.id)).content.decode()
    assert huge not in html
    assert len(html) < 60_000
    assert "download full value" in html
    result_url = reverse("admin:runs_app_timeline_payload", args=["tool_call", call.id])
    assert f"{result_url}?field=result&amp;download=1" in html
    # Even an event too big to read whole keeps its key attribute.
    assert 'tl-badge-succeeded">tool_call.succeeded' in html
    assert "calculator" in html

    full = client.get(result_url, {"field": "result", "download": "1"})
    assert full["Content-Disposition"] == (
        f'attachment; filename="tool_call-{call.id}-result.json"'
    )
    assert full.json() == {"blob": huge}
    event_url = reverse("admin:runs_app_timeline_payload", args=["event", events[0].id])
    assert client.get(event_url, {"field": "data"}).json()["result"]["blob"] == huge


@pytest.mark.django_db
def test_the_run_download_is_one_json_document(client, staff):
    run = RunFactory(status="completed")
    tool_call_events(run, 12)
    child = RunFactory(session=run.session, parent_run=run, status="completed")
    client.force_login(staff)
    response = client.get(reverse("admin:runs_app_run_timeline_download", args=[run.id]))
    assert response.status_code == 200
    assert response["Content-Disposition"] == f'attachment; filename="run-{run.id}.json"'
    document = json.loads(b"".join(response.streaming_content))
    assert document["format"] == "goaai.run.v1"
    assert document["run"]["id"] == str(run.id)
    assert document["child_runs"] == [str(child.id)]
    assert len(document["turns"]) == 2
    assert len(document["tool_calls"]) == 12
    assert [e["seq"] for e in document["events"]] == sorted(e["seq"] for e in document["events"])
    assert len(document["events"]) == 12 * 3 + 2 * 2


@pytest.mark.django_db
def test_the_query_count_does_not_grow_with_the_run(client, staff, django_assert_num_queries):
    small = RunFactory(status="completed")
    tool_call_events(small, 4, per_turn=2)  # 16 events, 2 turns, 4 tool calls
    big = RunFactory(status="completed")
    tool_call_events(big, 100, per_turn=2)  # 400 events, 50 turns, 100 tool calls
    for run in (small, big):
        Run.objects.filter(pk=run.pk).update(paused_seconds=1.0)
        waiter = ToolCall.objects.filter(run=run).first()
        add_events(
            run,
            [
                ("run.awaiting_input", {"kind": "approval", "tool_call": str(waiter.id)}),
                (
                    "tool_call.decided",
                    {"tool_call": str(waiter.id), "decision": "approved", "decided_by": staff.id},
                ),
                ("run.resumed", {"waited_seconds": 1.0, "answered": "approval"}),
            ],
        )
        RunFactory(session=run.session, parent_run=run, status="completed")
    client.force_login(staff)
    client.get(run_url(small.id))  # warm the session and the user

    def first_seq(run):
        return RunEvent.objects.filter(run=run).order_by("seq").first().seq

    pages = [
        (run_url, lambda run: run.id, lambda run: {}),
        (run_url, lambda run: run.id, lambda run: {"view": "compact", "after": first_seq(run) + 2}),
        (run_url, lambda run: run.id, lambda run: {"order": "desc", "type": "tool_call.*"}),
        (session_url, lambda run: run.session_id, lambda run: {}),
    ]
    for url_of, key, query in pages:
        with CaptureQueriesContext(connection) as small_queries:
            assert client.get(url_of(key(small)), query(small)).status_code == 200
        expected = len(small_queries)  # read now: the next request empties the log
        with django_assert_num_queries(expected):
            page = client.get(url_of(key(big)), query(big))
        assert len(seqs(page)) > 10


# The session timeline


@pytest.mark.django_db(transaction=True)
def test_the_session_timeline_interleaves_all_runs_by_seq(client, staff, inline_runtime, owner):
    concierge = rt.create_session(owner=owner, agent="concierge")
    parent = rt.run("concierge", "ask the assistant calculate 2+3", session=concierge.id)
    child = Run.objects.get(parent_run_id=parent.id)
    client.force_login(staff)
    page = client.get(session_url(concierge.id))
    assert page.status_code == 200
    html = page.content.decode()
    expected = list(
        RunEvent.objects.filter(session_id=concierge.id)
        .order_by("seq")
        .values_list("seq", "run_id")
    )
    assert seqs(page) == [seq for seq, _run in expected]
    runs_in_order = [run_id for _seq, run_id in expected if run_id]
    # The child's events sit between the parent's: interleaved, not grouped.
    first_child = runs_in_order.index(child.id)
    assert parent.id in runs_in_order[:first_child]
    assert parent.id in runs_in_order[first_child:]
    # Each row links its run's timeline; the runs are listed with their statuses.
    assert f'href="{run_url(parent.id)}"' in html
    assert f'href="{run_url(child.id)}"' in html
    runs = html.split('id="tl-runs-title"')[1].split("</section>")[0]
    assert runs.count('tl-status-completed">completed') == 2
    assert reverse("api:session-export", args=[concierge.id]) in html  # Download JSON
    # And the run page links back to the session's.
    assert session_url(concierge.id) in client.get(run_url(parent.id)).content.decode()


@pytest.mark.django_db
def test_a_session_without_runs(client, staff):
    session = SessionFactory()
    event_append(session_id=session.id, type="session.updated", data={"title": "renamed"})
    client.force_login(staff)
    html = client.get(session_url(session.id)).content.decode()
    assert "No runs yet." in html
    assert "session.updated" in html
    assert timezone.now().year > 2000  # the page rendered times without error
