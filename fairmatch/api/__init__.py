"""HTTP API: thin routers over the services; roles declared in each route's signature."""
