"""Source presets: another tool's own tables read in place as judgeflow's traces
(``JUDGEFLOW_SOURCE``), each a :class:`judgeflow.sources.trace_source.TraceSource`."""
