"""Clients for the three personas, logged in through the API's two doors."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from sessions_app.services import api_token_create


@pytest.fixture
def api(owner) -> APIClient:
    """Alice, authenticated by an API token."""
    _, raw = api_token_create(user_id=owner.pk, name="tests")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    return client


@pytest.fixture
def other_api(other_user) -> APIClient:
    """Bob, authenticated by an API token."""
    _, raw = api_token_create(user_id=other_user.pk, name="tests")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    return client


@pytest.fixture
def staff_api(staff) -> APIClient:
    """Charlie, a staff operator, logged in with the browser session."""
    client = APIClient()
    client.force_login(staff)
    return client
