"""The Celery application behind the distributed executor (``celery -A goaai worker``)."""

import logging
import os

from celery import Celery
from celery.worker.consumer import Consumer as CeleryConsumer

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "goaai.settings")

logger = logging.getLogger(__name__)

# How long tearing down a lost broker connection may wait on one of its sockets
# (Celery's own bound for the same teardown).
COLLECT_SOCKET_TIMEOUT = 5.0


class Consumer(CeleryConsumer):
    """The worker's consumer (``worker_consumer``), made to survive the loss of a
    Redis broker while it holds unacknowledged tasks, as every worker executing a
    run does (tasks are acknowledged late).

    On a lost connection Celery 5.7 first ``collect()``s it, which detaches its
    transport, then also ``close()``s it (celery/celery#10242, which fixed a socket
    leak for GH-9705). With Redis, ``collect()`` leaves the channel that was waiting
    on BRPOP half closed: the read raised, so the channel never got to close. The
    second close finishes it and tries to put the unacknowledged tasks back through
    the detached transport; the ``AttributeError`` ('NoneType' object has no
    attribute 'hostname') escapes Celery's handler and the worker exits. Had it
    got past that, the task still running would crash the worker when it finished:
    its late acknowledgement goes through the same channel, whose connection pool
    the close dropped.

    This consumer takes the lost connection and ``collect()``s it itself, as
    Celery up to 5.6 did, before Celery's handler runs (which then finds no
    connection to close): the half closed channel keeps its pool, so the running
    task is acknowledged once Redis is back (or, while it is still away, fails to
    be with a logged connection error, which Celery survives). Nothing is lost by
    not putting the unacknowledged tasks back: Redis is unreachable then anyway.
    Redis keeps them in its unacknowledged set, from which it delivers them again
    after the visibility timeout; and a Redis that came back empty lost them, for
    which goaai's reaper hands every run no live worker holds to a worker again.
    """

    def on_connection_error_after_connected(self, exc: Exception) -> None:
        lost, self.connection = self.connection, None
        if lost is not None:
            try:
                lost.collect(socket_timeout=COLLECT_SOCKET_TIMEOUT)
            except Exception:
                # The connection is being dropped because it failed; its state is
                # of no further use.
                logger.debug("Collecting the lost broker connection failed", exc_info=True)
        super().on_connection_error_after_connected(exc)


app = Celery("goaai")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
