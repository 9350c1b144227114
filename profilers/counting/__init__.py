"""The counting core: the dispatch mode and the fast path that see every op, classify its
copies, syncs and collectives, and charge them to the user's line,
timed by profilers/timing/ (below it: timing never imports counting). NB: importing this package
imports nothing (the report data must load without torch)."""
