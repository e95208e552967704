"""Settings of the server that bench/api_throughput.py measures: goaai's own, with
the benchmark's URLs (goaai's, plus the bare views under /bare/) and DEBUG off.

The database and the run-start limits come from the environment, as goaai reads
them (``DATABASE_URL``, ``GOAAI_RUN_RATE_PER_USER``, ``GOAAI_RUN_RATE_PER_TOKEN``).
"""

from goaai.settings import *  # noqa: F403

ROOT_URLCONF = "bench.api_urls"
DEBUG = False
