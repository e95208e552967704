"""The libraries the chat and the timeline draw markdown with: vendored as published,
with their licences, loaded by the pages that need them from goaai's own static
files (no CDN), and collected for production without a missing source map."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from django.conf import settings
from django.core.management import call_command
from django.test import Client, override_settings

from runs_app.models import SessionFork
from tests.factories import RunFactory, SessionFactory

VENDOR = Path(settings.BASE_DIR) / "sessions_app" / "static" / "sessions_app" / "vendor"
LIBRARIES = {
    "marked": ("marked.esm.js", "LICENSE"),
    "dompurify": ("purify.es.js", "LICENSE"),
    "highlight.js": ("highlight.min.js", "LICENSE"),
}


@pytest.mark.parametrize("library", sorted(LIBRARIES))
def test_each_library_is_vendored_with_its_licence(library: str) -> None:
    script, licence = LIBRARIES[library]
    code = (VENDOR / library / script).read_text()
    assert "export" in code  # an ES module the pages import
    # Production's manifest storage fails on a source map that is not there.
    assert "sourceMappingURL" not in code
    assert (VENDOR / library / licence).stat().st_size > 500
    versions = (VENDOR / "VERSIONS").read_text()
    package = "@highlightjs/cdn-assets" if library == "highlight.js" else library
    assert re.search(rf"^{re.escape(package)} \d+\.\d+\.\d+$", versions, re.M)


def test_production_collects_them(tmp_path) -> None:
    storages = {
        **settings.STORAGES,
        "staticfiles": {"BACKEND": "goaai.static.CollectedOrAppStaticFilesStorage"},
    }
    with override_settings(STATIC_ROOT=str(tmp_path), STORAGES=storages):
        call_command("collectstatic", interactive=False, verbosity=0)
    assert list((tmp_path / "sessions_app" / "vendor" / "marked").glob("marked.esm.*.js"))
    assert list((tmp_path / "sessions_app" / "js").glob("markdown.*.js"))


@pytest.mark.django_db
def test_the_chat_loads_the_code_colours_and_draws_a_forks_answers(owner) -> None:
    source = SessionFactory(owner=owner, title="Original")
    run = RunFactory(session=source, status="completed", output="**bold** <b>x</b>")
    fork = SessionFactory(owner=owner, title="Fork")
    SessionFork.objects.create(session=fork, source_session=source, source_run=run)
    client = Client()
    client.force_login(owner)
    html = client.get(f"/sessions/{fork.pk}/").content.decode()
    assert "/static/sessions_app/vendor/highlight.js/github.min.css" in html
    assert "/static/sessions_app/vendor/highlight.js/github-dark.min.css" in html
    assert "cdn" not in html.lower()
    # The inherited answer is markdown that the page's script draws, escaped here.
    assert 'class="msg-text markdown" data-markdown>**bold** &lt;b&gt;x&lt;/b&gt;</div>' in html


@pytest.mark.django_db
def test_the_timeline_draws_replies_and_outputs_as_markdown(client, staff, owner) -> None:
    run = RunFactory(session=SessionFactory(owner=owner), status="completed", output="*hi*")
    client.force_login(staff)
    html = client.get(f"/admin/runs_app/run/{run.pk}/timeline/").content.decode()
    assert '<script type="module" src="/static/runs_app/timeline-markdown.js"></script>' in html
    assert '<pre id="run-output" class="tl-pre" data-markdown-source>*hi*</pre>' in html
    assert '<pre id="run-input" class="tl-pre">' in html
