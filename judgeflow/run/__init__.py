"""A scoring run below the flow: its entry, schedule, gate, budget, progress, judge loop, outcomes and reuse."""
