"""What the people who chat are told when a run fails: a plain sentence per kind of
error, never the provider's own words.

A model provider's error carries what an operator needs (the URL that could not be
reached, an errno, the provider's message, which may echo the request back) and
nothing a person chatting can act on. So what such a person can read (the run's
events, the run as the API shows it to anyone but staff, the OpenAI-compatible API)
carries the kind and the sentence below; the run keeps the detail
(``Run.error_message``), which the admin and staff see.

goaai's own reasons for ending a run (a policy limit, a reply cut off too often, the
run's time budget) are written for the user already and are kept as they are.
"""

from __future__ import annotations

from goaai.runtime.vocabulary import ErrorKind, RunStatus

# The sentence for each kind of error from a model or a service a run depends on.
ERROR_SENTENCES: dict[str, str] = {
    ErrorKind.RATE_LIMITED: "The model is busy right now. Try again in a moment.",
    ErrorKind.UNAVAILABLE: (
        "The model, or a service this agent needs, is unavailable right now. "
        "Try again in a few minutes."
    ),
    ErrorKind.TIMEOUT: "The model took too long to answer. Try again in a moment.",
    ErrorKind.INTERNAL: (
        "Something went wrong on our side while answering. Try again; if it keeps "
        "happening, tell the people who run this service."
    ),
    ErrorKind.INVALID_CALL: (
        "The model could not handle this request. Try a shorter or simpler message."
    ),
    ErrorKind.TRUNCATED: (
        "The answer was cut off by the model's length limit before it was complete."
    ),
}
UNKNOWN_ERROR = "The answer could not be finished. Try again."

# Kinds whose messages goaai itself writes for the user (policy limits, replies cut
# off): shown as they are.
_OWN_WORDS = frozenset({ErrorKind.DOMAIN_REJECTION, ErrorKind.TRUNCATED})


def public_error_message(*, kind: str, message: str, status: str = RunStatus.FAILED) -> str:
    """What a person chatting is told of a run that ended ``status`` with an error
    of ``kind`` whose detail is ``message``.

    goaai's own reasons (``domain_rejection`` and ``truncated`` errors, and a run
    that spent its time budget: status ``timed_out``) are kept; any other error has
    the sentence of its kind (:data:`ERROR_SENTENCES`)."""
    if message and (kind in _OWN_WORDS or status == RunStatus.TIMED_OUT):
        return message
    return ERROR_SENTENCES.get(kind, UNKNOWN_ERROR)
