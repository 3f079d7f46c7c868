"""Shadow scoring: a candidate judge scores a stratified sample of recent traces
beside the judge in force, into ``judgeflow.shadow_results`` only (never
``eval_results``, never an alert), and a report says how far they agree."""
