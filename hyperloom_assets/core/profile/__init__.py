"""Where the time goes: a profiler's trace reduced to top ops and category shares. Pure code."""
