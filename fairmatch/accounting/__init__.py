"""Slurm-style accounting: the association tree and the decay of what is charged to it. Pure logic."""
