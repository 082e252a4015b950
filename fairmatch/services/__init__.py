"""Services: the use cases, each opening its transactions and calling the data-access classes and the pure domain."""
