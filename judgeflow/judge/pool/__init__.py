"""Judge worker processes: the run's pool, each worker, and the fork server that starts them."""
