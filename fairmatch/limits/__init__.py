"""Site limits (DIRAC's Limiter): RunningLimit and MatchingDelay per site × attribute × value. Pure logic."""
