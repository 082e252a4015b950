"""Database access: the schema, the engine, and one data-access class per area (the only SQL)."""
