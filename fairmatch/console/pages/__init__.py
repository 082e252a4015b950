"""One module per console page; ROUTERS lists their routers in navigation order."""

from __future__ import annotations

from fairmatch.console.pages import actions, overview

ROUTERS = [overview.router, actions.router]
