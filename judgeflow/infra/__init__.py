"""The local machine: the heap, the state directory's lock, long-lived local processes, the local Prefect server."""
