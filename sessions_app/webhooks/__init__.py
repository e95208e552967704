"""Webhooks: users subscribe URLs to events, goaai sends them signed messages.

``outbox`` writes deliveries in the transaction of the change they announce,
``delivery`` claims and sends them with retries (``sending`` signs and posts one
attempt, ``addresses`` refuses private destinations), ``dispatcher`` does it in the
background of every server and worker, ``services`` and ``selectors`` are what the
API, the settings page and the admin call.
"""
