"""The operators' console: server-rendered pages under /ui, served by the service itself.

`auth` signs a browser in (the API's tokens, in a cookie) and guards forms against
cross-site requests; `render` turns a template into a page with its security
headers; `pages` holds one module per page, each reading through the same
services the API calls. Nothing here is on /match's path.
"""
