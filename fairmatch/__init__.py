"""fairmatch: fair-share matcher for grid and batch workload management."""

__version__ = "0.1.0"
