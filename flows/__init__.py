"""judgeflow's Prefect flows (``judgeflow.flows``)."""

from judgeflow.flows.heartbeat import stop_joining_heartbeats

stop_joining_heartbeats()
