"""Production's static files storage: content-hashed names once `collectstatic`
has run, the files' own names (served from the apps) for whatever it did not
collect, and never an error that would fail the page."""

from __future__ import annotations

import json

from goaai.static import CollectedOrAppStaticFilesStorage


def _storage(root) -> CollectedOrAppStaticFilesStorage:
    return CollectedOrAppStaticFilesStorage(location=str(root), base_url="/static/")


def test_nothing_collected_links_the_apps_files_by_their_own_names(tmp_path):
    storage = _storage(tmp_path)

    assert storage.url("sessions_app/app.css") == "/static/sessions_app/app.css"
    assert storage.url("no/such/file.js") == "/static/no/such/file.js"


def test_collected_files_are_linked_by_their_hashed_names(tmp_path):
    (tmp_path / "staticfiles.json").write_text(
        json.dumps(
            {
                "version": "1.1",
                "paths": {"sessions_app/app.css": "sessions_app/app.0123456789ab.css"},
                "hash": "x",
            }
        )
    )
    storage = _storage(tmp_path)

    assert storage.url("sessions_app/app.css") == "/static/sessions_app/app.0123456789ab.css"
    # Added since the last collectstatic: served from its app under its own name.
    assert storage.url("sessions_app/admin.css") == "/static/sessions_app/admin.css"
