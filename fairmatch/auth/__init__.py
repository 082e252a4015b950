"""Who is calling (JWT bearer tokens) and what they may do (roles). Pure logic."""
