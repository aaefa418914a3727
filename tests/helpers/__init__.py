"""What fuzzdist's own tests share: planted bugs, rank functions, the shrinking harness,
CLI and process helpers, and the scripts tests start in subprocesses."""
