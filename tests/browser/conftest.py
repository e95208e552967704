"""Real-browser tests: Debian's headless Chromium, driven by Playwright, against goaai
served by daphne (the chat page needs WebSockets) on a SQLite file of its own.

Without Chromium or the Playwright package the tests are skipped with the reason,
except in CI (``CI=true``), where they fail instead. In the suite's PostgreSQL pass
they are skipped: they do not use the suite's database, so a second run would test
exactly the same thing again.

Each failing test leaves a screenshot of every page it had open in
``test-artifacts/browser/<test>[-<n>].png``, and its report carries the end of the
server's log.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.browser.helpers import login
from tests.browser.server import Api, LiveServer

ARTIFACTS = Path("test-artifacts") / "browser"  # under the project folder
VIEWPORT = {"width": 1280, "height": 800}
# Explicit waits: long enough for a loaded machine, short next to pytest-timeout.
WAIT_MS = 15_000


def _missing() -> str:
    if importlib.util.find_spec("playwright") is None:
        return 'the Playwright package is not installed (pip install "playwright>=1.45,<2")'
    if shutil.which("chromium") is None:
        return "Chromium is not installed (apt-get install chromium)"
    return ""


def _on_postgres() -> bool:
    return os.environ.get("DATABASE_URL", "").startswith(("postgres://", "postgresql://"))


def pytest_configure(config: pytest.Config) -> None:
    if importlib.util.find_spec("playwright") is not None:
        from playwright.sync_api import expect

        expect.set_options(timeout=WAIT_MS)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    browser_items = [item for item in items if item.get_closest_marker("browser")]
    if not browser_items:
        return
    if _on_postgres():
        reason = (
            "browser tests run in the SQLite pass only: they use a database of their own, "
            "so the PostgreSQL pass would repeat them unchanged"
        )
    elif _missing():
        if os.environ.get("CI") == "true":
            return  # in CI a missing browser fails the tests instead of skipping them
        reason = f"needs a browser: {_missing()}"
    else:
        return
    for item in browser_items:
        item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture(scope="session", autouse=True)
def _browser_prerequisites() -> None:
    reason = _missing()
    if reason:
        pytest.fail(f"CI=true and the browser tests cannot run: {reason}")


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    setattr(item, f"rep_{report.when}", report)
    server: LiveServer | None = getattr(item.config, "_goaai_live_server", None)
    if report.failed and server is not None:
        since = getattr(item, "_goaai_log_start", 0)
        report.sections.append(("daphne log (this test)", server.log_tail(since)))
    return report


@pytest.fixture(scope="session")
def goaai_server(
    tmp_path_factory: pytest.TempPathFactory, pytestconfig: pytest.Config
) -> Iterator[LiveServer]:
    """goaai on daphne, with a fresh database holding alice and bob."""
    server = LiveServer(workdir=tmp_path_factory.mktemp("goaai-browser"))
    server.prepare()
    server.start()
    pytestconfig._goaai_live_server = server  # type: ignore[attr-defined]
    try:
        yield server
    finally:
        server.stop()
        pytestconfig._goaai_live_server = None  # type: ignore[attr-defined]


@pytest.fixture(autouse=True)
def _mark_log(request: pytest.FixtureRequest) -> None:
    server: LiveServer | None = getattr(request.config, "_goaai_live_server", None)
    request.node._goaai_log_start = server.log_size() if server else 0


# Package scope, not session: Playwright's sync API runs its event loop in this
# thread while it is open, and an async test after the browser tests would find a
# loop already running.
@pytest.fixture(scope="package")
def playwright_browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=shutil.which("chromium"),
            headless=True,
            args=["--no-sandbox", "--disable-dev-shm-usage"],
        )
        try:
            yield browser
        finally:
            browser.close()


@pytest.fixture(scope="package")
def storage_states(playwright_browser: Any, goaai_server: LiveServer) -> dict[str, Any]:
    """Signed-in cookies of alice and bob (each signs in once through the login page)."""
    states = {}
    for username in ("alice", "bob"):
        context = playwright_browser.new_context(base_url=goaai_server.url)
        try:
            login(context.new_page(), username)
            states[username] = context.storage_state()
        finally:
            context.close()
    return states


@pytest.fixture
def new_context(
    request: pytest.FixtureRequest,
    playwright_browser: Any,
    goaai_server: LiveServer,
    storage_states: dict[str, Any],
) -> Iterator[Any]:
    """Opens browser contexts (``new_context("alice")``; ``None``: signed out) and, if
    the test failed, screenshots each of their pages before closing them."""
    contexts: list[Any] = []
    # What Chromium reports of the Content-Security-Policy: every page must meet it.
    violations: list[str] = []

    def watch(page: Any) -> None:
        page.on(
            "console",
            lambda message: (
                violations.append(f"{page.url}: {message.text}")
                if "Content Security Policy" in message.text
                else None
            ),
        )

    def open_context(user: str | None = "alice", **options: Any) -> Any:
        context = playwright_browser.new_context(
            base_url=goaai_server.url,
            viewport=options.pop("viewport", VIEWPORT),
            storage_state=storage_states[user] if user else None,
            **options,
        )
        context.set_default_timeout(WAIT_MS)
        context.on("page", watch)
        contexts.append(context)
        return context

    yield open_context

    failed = any(
        getattr(getattr(request.node, f"rep_{when}", None), "failed", False)
        for when in ("setup", "call")
    )
    pages = [page for context in contexts for page in context.pages]
    if failed and pages:
        folder = request.config.rootpath / ARTIFACTS
        folder.mkdir(parents=True, exist_ok=True)
        name = re.sub(r"[^\w.-]+", "_", request.node.name)
        for index, page in enumerate(pages):
            suffix = "" if index == 0 else f"-{index + 1}"
            path = folder / f"{name}{suffix}.png"
            try:
                page.screenshot(path=str(path), full_page=True)
            except Exception as error:  # a crashed page must not hide the test's failure
                print(f"could not screenshot {page.url}: {error}")
            else:
                print(f"screenshot of {page.url}: {path}")
    for context in contexts:
        context.close()
    assert violations == [], "the pages broke their Content-Security-Policy"


@pytest.fixture
def page(new_context: Any) -> Any:
    """A page signed in as alice, 1280 by 800 pixels."""
    return new_context("alice").new_page()


@pytest.fixture(scope="session")
def alice_api(goaai_server: LiveServer) -> Api:
    return Api.login(goaai_server, "alice")


@pytest.fixture(scope="session")
def bob_api(goaai_server: LiveServer) -> Api:
    return Api.login(goaai_server, "bob")
