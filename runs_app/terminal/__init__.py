"""``manage.py chat``: a conversation with an agent in a terminal.

:mod:`~runs_app.terminal.feed` brings the session's events and the model's text as
it is written, :mod:`~runs_app.terminal.transcript` prints them,
:mod:`~runs_app.terminal.interrupts` reads Ctrl-C, and
:mod:`~runs_app.terminal.conversation` sends the user's messages, asks the user
what a run waits for, and stops a run on Ctrl-C.
"""
