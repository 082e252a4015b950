"""Jobs: specifications, what a submission becomes, the lifecycle state machine. Pure logic."""
