"""Slurm-style accounting: the association tree and what is charged to it."""
