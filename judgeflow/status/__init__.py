"""Read-only figures for people, read across the features: `judgeflow status`
(work.py, notes.py), `judgeflow db check` (check.py) and a backfill's estimate
(backfill.py)."""
