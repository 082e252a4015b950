"""One module per console page; ROUTERS lists their routers in navigation order."""

from __future__ import annotations

from fairmatch.console.pages import overview

ROUTERS = [overview.router]
