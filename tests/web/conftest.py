"""Browser-session clients for the three personas."""

from __future__ import annotations

import pytest
from django.test import Client


@pytest.fixture
def alice_client(owner) -> Client:
    client = Client()
    client.force_login(owner)
    return client


@pytest.fixture
def bob_client(other_user) -> Client:
    client = Client()
    client.force_login(other_user)
    return client


@pytest.fixture
def staff_client(staff) -> Client:
    client = Client()
    client.force_login(staff)
    return client
