"""HTTP API: thin routers over the domain logic."""
