"""Database access: the schema, the engine and dialect helpers."""
