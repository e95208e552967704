"""Reads behind the run and session timelines of the admin.

The event log is the record; the timeline shows it a page at a time and looks up only
what that page refers to. Every query here is bounded by the page size (100 events),
walks an index that exists (``(run, seq)``, ``(session, seq)``, primary keys) and
never counts a big table, so a run with a million tool calls renders as fast as one
with ten. Values are cut in SQL (``Substr`` of the JSON text) so that one huge tool
result cannot make a page slow either; the full value is one click away.

- ``filters``: what the URL asks for, and the filtering of the log;
- ``values``: values cut for display, payload URLs, durations;
- ``references``: the turns, tool calls and users a page refers to;
- ``rows``: an event's row, its outcome badge and its summary;
- ``fold``: the compact view's folding of started/finished pairs;
- ``waits``: time spent waiting for people;
- ``headers``: the tops of a run's and a session's timelines;
- ``pages``: a page of events, with all of the above.

The views are in ``runs_app.admin_timeline``.
"""
