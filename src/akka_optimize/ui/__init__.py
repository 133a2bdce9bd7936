"""The web dashboard under ``/ui`` (issue 27).

Server-rendered Jinja2 pages plus a little JavaScript (``static/dashboard.js``)
that reads the same JSON routes the CLI reads, with the user's token, and polls
them for live updates: nothing is computed twice. The chart library is uPlot,
vendored under ``static/vendor/uplot`` with its licence (no CDN, no build step).

Access: ``/ui/login`` checks a token with the check the service gives
(:class:`~akka_optimize.ui.pages.Dashboard`: the service's own
:func:`~akka_optimize.core.auth.authenticate`) and stores it in the cookie
:data:`~akka_optimize.ui.pages.COOKIE` (``Path=/ui; SameSite=Strict``; not
``HttpOnly``, because the page's JavaScript reads it to send
``Authorization: Bearer …`` to the JSON routes). Each page checks that cookie
first and shows the login form, never a traceback, when it is missing or wrong.
"""

from __future__ import annotations

from .pages import Dashboard, TokenCheck

__all__ = ["Dashboard", "TokenCheck"]
