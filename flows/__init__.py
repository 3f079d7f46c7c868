"""judgeflow's Prefect flows (``judgeflow.flows``)."""
