"""Sign-in lockouts: who a failed sign-in is counted against, and what a locked-out
client is told.

django-axes counts failed sign-ins per account and per address (in the database,
so every server process counts together) and refuses any sign-in of a locked-out
account or address until the cool-off has passed. These functions are its
configured hooks: the client's address (behind goaai's TLS proxy, the one the proxy
saw) and the answer to a locked-out request (the API's error shape under /api/,
the sign-in form with a message elsewhere).
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib import admin
from django.contrib.admin.forms import AdminAuthenticationForm
from django.contrib.auth.forms import AuthenticationForm
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.template.response import TemplateResponse

LOCKED_OUT = "locked_out"


def cool_off_seconds() -> int:
    """How long a lockout lasts."""
    return int(settings.AXES_COOLOFF_TIME.total_seconds())


def lockout_message() -> str:
    minutes = max(1, round(cool_off_seconds() / 60))
    return (
        "Too many failed sign-ins for this account or from this address. "
        f"Try again in {minutes} minute{'s' if minutes != 1 else ''}."
    )


def client_address(request: HttpRequest) -> str | None:
    """The address failed sign-ins are counted against.

    Behind the TLS proxy (``GOAAI_BEHIND_TLS_PROXY``) every request comes from the
    proxy, which appends the address it saw to ``X-Forwarded-For``: that last entry
    is the client's (earlier entries come from the client and prove nothing).
    Otherwise a client could name any address it likes there, so only the
    connection's own address counts.
    """
    if settings.GOAAI_BEHIND_TLS_PROXY:
        forwarded = str(request.META.get("HTTP_X_FORWARDED_FOR", ""))
        last = forwarded.rsplit(",", 1)[-1].strip()
        if last:
            return last
    address = request.META.get("REMOTE_ADDR")
    return str(address) if address else None


def lockout_response(
    request: HttpRequest, original_response: Any = None, credentials: Any = None
) -> HttpResponse:
    """What a locked-out sign-in gets: a 429 in the API's error shape under /api/,
    and the sign-in form (the site's or the admin's) saying why, elsewhere."""
    status = settings.AXES_HTTP_RESPONSE_CODE
    if request.path.startswith("/api/"):
        response: HttpResponse = JsonResponse(
            {
                "type": "client_error",
                "errors": [{"code": LOCKED_OUT, "detail": lockout_message(), "attr": None}],
            },
            status=status,
        )
    else:
        match = request.resolver_match
        if match is not None and match.namespace == "admin":
            form = AdminAuthenticationForm(request, initial=_username(request))
            # An unbound form with the message as its error: validating the posted
            # one would try to sign in again.
            form.cleaned_data = {}
            form.add_error(None, lockout_message())
            context = {**admin.site.each_context(request), "form": form, "title": "Log in"}
            response = TemplateResponse(request, "admin/login.html", context, status=status)
        else:
            context = {
                "form": AuthenticationForm(request, initial=_username(request)),
                "locked_out": lockout_message(),
                "next": request.POST.get("next", ""),
            }
            response = TemplateResponse(request, "registration/login.html", context, status=status)
        response.render()
    response["Retry-After"] = str(cool_off_seconds())
    return response


def _username(request: HttpRequest) -> dict[str, str]:
    return {"username": request.POST.get("username", "")[:150]}
