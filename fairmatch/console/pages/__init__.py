"""One module per console page; ROUTERS lists their routers in navigation order."""

from __future__ import annotations

from fairmatch.console.pages import actions, jobs, overview, shares, sites, taskqueues, why_not

ROUTERS = [overview.router, taskqueues.router, why_not.router, shares.router, sites.router, actions.router, jobs.router]
