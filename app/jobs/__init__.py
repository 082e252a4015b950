"""Jobs: specifications, the lifecycle state machine and their SQL."""
