"""Logging in and out: the login form, its double-submit CSRF cookie, and the session cookie.

The session cookie (``COOKIE``) is what the gate reads; it is ``HttpOnly``, ``SameSite=Strict`` and
``Secure`` unless ``CONSOLE_COOKIE_SECURE=false``. Until a browser logs in it keeps one login CSRF
token (``LOGIN_CSRF``), which the gate checks on ``POST /login``. A refused login is audited by
``application.auth`` and answers the same whether the name exists or not; a locked name is 429.

    GET  /            → /cases
    GET  /login, POST /login   username password csrf
    POST /logout
"""

from __future__ import annotations

import re
import secrets
from typing import Final

from aiohttp import web
from backbone.bodies import form_body

from ops_console.application import auth
from ops_console.application.ports import Session
from ops_console.entrypoints.pages import SESSION, Pages, page

COOKIE: Final = "console_session"
LOGIN_CSRF: Final = "console_login_csrf"


class LoginPages(Pages):
    def routes(self) -> list[web.RouteDef]:
        return [
            web.get("/", self.home),
            web.get("/login", self.login_page),
            web.post("/login", self.login),
            web.post("/logout", self.logout),
        ]

    async def home(self, request: web.Request) -> web.StreamResponse:
        raise web.HTTPSeeOther("/cases")

    async def login_page(self, request: web.Request) -> web.StreamResponse:
        return await self.form(request, "", 200)

    async def form(self, request: web.Request, error: str, status: int) -> web.Response:
        """The login form, with ``error`` said; the gate shows it too when the form's token is stale."""
        # one token per browser until it logs in: a second tab (or the browser's own favicon
        # request landing here) must not invalidate the form already on screen
        kept = request.cookies.get(LOGIN_CSRF, "")
        token = kept if re.fullmatch(r"[A-Za-z0-9_-]{32}", kept) else secrets.token_urlsafe(24)
        response = page(request, "login.html", {"error": error, "login_csrf": token}, status)
        secure = self._parts.settings.cookie_secure
        response.set_cookie(LOGIN_CSRF, token, httponly=True, samesite="Strict", secure=secure, max_age=1800)
        return response

    async def login(self, request: web.Request) -> web.StreamResponse:
        settings, form = self._parts.settings, form_body(request)
        username, password = str(form.get("username", "")), str(form.get("password", ""))
        try:
            logged = (
                await auth.login(self._parts.store, username, password, settings.session_ttl_s)
                if username and password
                else None
            )
        except auth.Locked:
            wait = auth.FAILURE_WINDOW_S // 60
            return await self.form(request, f"Too many failed logins: wait up to {wait} minutes.", 429)
        if logged is None:
            return await self.form(request, "Wrong name or password.", 401)
        response = web.HTTPSeeOther("/cases")
        response.set_cookie(
            COOKIE,
            logged.cookie,
            httponly=True,
            samesite="Strict",
            secure=settings.cookie_secure,
            max_age=settings.session_ttl_s,
        )
        response.del_cookie(LOGIN_CSRF)
        return response

    async def logout(self, request: web.Request) -> web.StreamResponse:
        session: Session = request[SESSION]
        await auth.logout(self._parts.store, request.cookies[COOKIE], session.operator.username)
        response = web.HTTPSeeOther("/login")
        response.del_cookie(COOKIE)
        return response
